"""``enginedead calibrate``: what steps cost on this machine, and what to set.

It sizes a serving configuration (``--max-num-seqs``, ``--max-num-batched-tokens``,
``--max-model-len``; vLLM's defaults otherwise): the step model, the worst step the
scheduler can form, and what to set; ``--forecast-layers`` for a model too large to run
here.  With ``--batch-sizes`` alone: decode steps per batch size and the deadline for each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..compat import llm_config, moe, versions
from ..harness import outputs
from ..harness.measure import measure, size
from ..harness.outputs import Output
from ..logic.inputs.modelconfig import preset_summary, presets, read_config
from ..logic.inputs.values import BadValue, parse_batch_sizes
from ..logic.machine import meminfo, this_machine
from ..logic.sizing import kvcache, shapes
from ..logic.sizing.answer import MoeKernel
from ..logic.sizing.decode import calibration, calibration_json, format_calibration
from ..logic.sizing.jsonout import answer_json
from ..logic.sizing.plan import SizingPlan, SizingRefused, default_limits, plan_sizing
from ..logic.sizing.slices import GIB
from ..logic.sizing.text import format_sizing
from .common import (
    GUARD_SWITCH,
    Refused,
    add_engine_flags,
    add_ranks,
    arg,
    check_environment_options,
    deadline,
    headroom,
    number,
    output_to,
    positive_int,
    run_claimed,
)
from .plots import plot, plot_sizing
from .preflight import preflight, refuse_batch_sizes

SERVER_SEQS, SERVER_TOKENS = shapes.SERVER_MAX_NUM_SEQS, shapes.SERVER_MAX_NUM_BATCHED_TOKENS

#: calibrate's flags that ask for sizing a serving configuration
SIZING_FLAGS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "kv_cache_tokens", "deadline",
                "forecast_layers", "no_validate", "server_memory_gib", "gpu_memory_utilization", "repeat")

#: vLLM's legacy setting of the CPU KV cache (GiB), read when set and not empty
KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"

fraction = number(float, 0, "a number", " (vLLM's share of the machine's memory, e.g. 0.92)", maximum=1.0)


EPILOG = ("exit status: 0 measured (the advice printed), 2 bad usage, nothing started; 1 an engine failed "
          "(see the log); 130 interrupted.  Reads: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (the deadline in "
          "force, unless --deadline), VLLM_CPU_KVCACHE_SPACE (the server's KV cache, unless "
          "--kv-cache-tokens), ENGINEDEAD_GUARD (checked as the plugin reads it; calibrate's "
          "engines run unguarded), VLLM_PLUGINS, LD_PRELOAD (the engines inherit it: say which you serve "
          "with), OMP_NUM_THREADS, VLLM_CPU_OMP_THREADS_BIND, TMPDIR (the log).")


def add_parser(sub: Any, verbose: bool) -> None:
    cal = sub.add_parser("calibrate",
                         help="size a serving configuration: step model, worst step, what to set",
                         description="Measure real steps on one engine per model (or depth slice), fit "
                         "the step model, bound the worst step vLLM's scheduler can form under the serving "
                         "limits, and print the deadline, the guard's policy and the limits to set.  With "
                         "--batch-sizes and no serving flag: decode steps per batch size only.",
                         epilog=EPILOG)
    cal.verbose = verbose
    add_engine_flags(cal, None, "decode batch sizes to measure (default 1,2,8,32 and --max-num-seqs); alone, "
                     "without a serving flag: the decode-only calibration at these sizes")
    cal.add_argument("--headroom", type=headroom, default=3.0, metavar="X",
                     help="deadline = headroom x predicted step time (default 3)")
    cal.add_argument("--steps", type=positive_int, default=None, metavar="N",
                     help="measured decode steps per batch size, after warm-up (default 4; 64 with "
                     "--batch-sizes alone)")
    cal.add_argument("--max-num-seqs", type=positive_int, metavar="N",
                     help=f"vLLM's flag: sequences per step (default {SERVER_SEQS}, vLLM's for the CPU "
                     "server)")
    cal.add_argument("--max-num-batched-tokens", type=positive_int, metavar="T",
                     help=f"vLLM's flag: tokens per step (default {SERVER_TOKENS}, vLLM's for the CPU "
                     "server)")
    cal.add_argument("--max-model-len", type=positive_int, metavar="L",
                     help="vLLM's flag: longest context (default: the model's, from its config.json)")
    cal.add_argument("--kv-cache-tokens", type=positive_int, metavar="K",
                     help="your server's KV cache in tokens (vLLM logs 'KV cache size: K tokens' at "
                     f"start); default: vLLM's rule for the CPU backend ({KV_SPACE_ENV} GiB if set, else "
                     "the machine's memory x --gpu-memory-utilization less the weights)")
    cal.add_argument("--server-memory-gib", type=positive_int, metavar="G",
                     help="the serving machine's memory in GiB, for vLLM's rule (default: this machine's; "
                     "where the model does not fit it, the smallest common size that serves it, and the "
                     "answer says so)")
    cal.add_argument("--gpu-memory-utilization", type=fraction, metavar="F",
                     help="vLLM's flag: on CPU the share of memory it takes (default "
                     f"{kvcache.MEMORY_FRACTION})")
    cal.add_argument("--repeat", type=positive_int, default=None, metavar="N",
                     help="measure the runs N times on the same engines; the answer fits them all, and each "
                     "round's worst step is printed alone to show how far two runs can differ")
    cal.add_argument("--deadline", type=deadline, metavar="SECONDS",
                     help="the deadline the limits must stay under "
                     f"(default: {versions.DEADLINE_ENV} or 300)")
    cal.add_argument("--forecast-layers", type=arg(parse_depths), metavar="K1,K2",
                     help="measure depth slices of the model's config (K layers of each layer type, dummy "
                     "weights) and forecast the full depth: for models too large to run here")
    cal.add_argument("--no-validate", action="store_true",
                     help="do not form the worst step on the engine (it is predicted only)")
    cal.add_argument("--plot", metavar="FILE.png",
                     help="draw step time against sequences per context, with the deadlines "
                     "(needs matplotlib)")
    add_ranks(cal)
    cal.add_argument("--json", action="store_true", help="print the results as JSON")
    cal.add_argument("--list-models", action="store_true",
                     help="list the model presets --model takes by name (configs shipped with the package; "
                     "dummy weights) and exit")


def run(args: argparse.Namespace) -> int:
    if args.list_models:
        return list_models(args.json)
    claimed = preflight(args, before_model=lambda a: check_environment_options(GUARD_SWITCH),
                        after_model=_plan_if_sizing,
                        max_model_len=None if sizing_requested(args) else llm_config.DEFAULT_MAX_MODEL_LEN)
    return run_claimed(args, claimed, run_calibrate)


def list_models(as_json: bool) -> int:
    """The presets: name, what the config is, where it lies."""
    found = {}
    for name, directory in presets().items():
        config = read_config(Path(directory) / "config.json")
        found[name] = {"directory": directory, "summary": preset_summary(config)}
    if as_json:
        print(json.dumps(found, indent=2))
        return 0
    for name, info in found.items():
        print(f"{name:<18} {info['summary']}")
    print("use: enginedead calibrate --model NAME (a directory path works too)")
    return 0


def parse_depths(raw: str) -> tuple[int, ...]:
    """``"1,2"`` -> (1, 2): slice depths, layers per layer type."""
    try:
        depths = parse_batch_sizes(raw)
    except BadValue as exc:
        raise BadValue(str(exc).replace("batch size", "slice depth").replace("8,64", "1,2")) from None
    return depths


def sizing_requested(args: argparse.Namespace) -> bool:
    """Sizing, unless --batch-sizes alone asks for the decode-only calibration."""
    if args.command != "calibrate":
        return False
    return args.batch_sizes is None or any(getattr(args, f) not in (None, False) for f in SIZING_FLAGS)


def _plan_if_sizing(args: argparse.Namespace) -> None:
    if sizing_requested(args):
        args.sizing_plan = sizing_plan(args)
    else:  # the decode-only calibration: one offline engine at the largest batch size
        refuse_batch_sizes(args, server=False)


def sizing_plan(args: argparse.Namespace) -> SizingPlan:
    """The serving limits (vLLM's defaults where not given), checked as vLLM would, and the sizing plan."""
    _, longest = default_limits(args.model)
    given = {}
    values = {}
    for flag, default, why in (
        ("max_num_seqs", shapes.SERVER_MAX_NUM_SEQS, "vLLM's default for the CPU server"),
        ("max_num_batched_tokens", shapes.SERVER_MAX_NUM_BATCHED_TOKENS, "vLLM's default for the CPU server"),
        ("max_model_len", longest or 2048, "the model's, from its config.json"),
    ):
        value = getattr(args, flag)
        name = "--" + flag.replace("_", "-")
        values[flag] = default if value is None else value
        given[flag] = f"{name} {values[flag]}" + ("" if value is not None else f" ({why})")
    given["kv_cache_tokens"] = f"--kv-cache-tokens {args.kv_cache_tokens}"
    limits = shapes.Limits(values["max_num_seqs"], values["max_num_batched_tokens"], values["max_model_len"],
                           args.kv_cache_tokens)
    problem = shapes.limits_problem(limits, longest, given)
    if problem:
        raise Refused(problem)
    try:
        plan = plan_sizing(args.model, limits, args.batch_sizes, args.steps, args.forecast_layers,
                           validate=not args.no_validate, tensor_parallel=args.tensor_parallel_size)
    except SizingRefused as exc:
        raise Refused(str(exc)) from None
    return dataclasses.replace(plan, kv=server_cache(args, limits))


def server_cache(args: argparse.Namespace, limits: shapes.Limits,
                 environ: dict[str, str] | None = None) -> kvcache.KvCache:
    """The KV cache the server will have: --kv-cache-tokens, else VLLM_CPU_KVCACHE_SPACE, else vLLM's rule
    on the serving machine's memory (--server-memory-gib, else this machine's); refused in one line when
    vLLM would not start with it."""
    env = os.environ if environ is None else environ
    raw = env.get(KV_SPACE_ENV, "")
    space = None
    if raw != "" and args.kv_cache_tokens is None:
        try:
            space = int(raw)
        except ValueError:
            raise Refused(f"{KV_SPACE_ENV}={raw!r} (from the environment) is not a whole number of GiB, "
                          "which vLLM requires") from None
    config, _ = default_limits(args.model)
    memory = args.server_memory_gib * GIB if args.server_memory_gib else None
    try:
        cache = kvcache.server_cache(
            config, limits.max_model_len, limits.max_num_batched_tokens, this_memory=meminfo("MemTotal"),
            memory=memory, fraction=args.gpu_memory_utilization or kvcache.MEMORY_FRACTION, space_gib=space,
            tokens=args.kv_cache_tokens)
    except kvcache.KvCacheError as exc:
        raise Refused(str(exc)) from None
    given = (f"--kv-cache-tokens {args.kv_cache_tokens}" if args.kv_cache_tokens else
             f"{KV_SPACE_ENV}={space}" if space is not None else
             f"--server-memory-gib {args.server_memory_gib}" if args.server_memory_gib else
             "this machine's memory")
    problem = kvcache.cache_problem(cache, limits.max_model_len, limits.max_num_batched_tokens, given)
    if problem:
        raise Refused(problem)
    return cache


def run_sizing(args: argparse.Namespace, claimed: dict[str, Output]) -> int:
    log = claimed["log"]
    limit = float(args.deadline) if args.deadline else versions.stock_deadline_s()
    t0 = time.monotonic()
    with output_to(log, args.verbose) as progress:
        answer = size(args.sizing_plan, args.headroom, limit, progress, repeats=args.repeat or 1)
        answers = moe.kernel_answers(args.sizing_plan.config)  # vLLM is imported: its own checks
    shape = moe.expert_width(args.sizing_plan.config)
    if answers is not None and shape is not None:
        kernel = MoeKernel(moe.describe(answers, shape[0]), {a.tensor_parallel: a.fused for a in answers})
        answer = dataclasses.replace(answer, moe_kernel=kernel)
    answer = dataclasses.replace(answer, wall_s=time.monotonic() - t0, log=log.path)
    if "plot" in claimed:
        try:
            plot_sizing(claimed["plot"], answer)
        except outputs.OutputError as exc:  # proven writable at the start; it changed since
            print(f"enginedead calibrate: error: the plot was not written: {exc}", file=sys.stderr)
            return 2
        answer = dataclasses.replace(answer, plot=args.plot)
    if args.json:
        print(json.dumps(answer_json(answer), indent=2))
        return 0
    print(format_sizing(answer))
    if args.plot:
        print(f"plot: {args.plot}")
    print(f"log: {log.path}")
    return 0


def run_calibrate(args: argparse.Namespace, claimed: dict[str, Output]) -> int:
    if sizing_requested(args):
        return run_sizing(args, claimed)
    log = claimed["log"]
    with output_to(log, args.verbose) as progress:
        results = measure(args.model, args.batch_sizes, args.steps or 64, progress,
                          tensor_parallel=args.tensor_parallel_size)
    answer = calibration(results, args.headroom, versions.stock_deadline_s(), versions.installed_version(),
                         args.model, this_machine())
    if "plot" in claimed:
        try:
            plot(claimed["plot"], answer)
        except outputs.OutputError as exc:  # proven writable at the start; it changed since
            print(f"enginedead calibrate: error: the plot was not written: {exc}", file=sys.stderr)
            return 2
        answer = dataclasses.replace(answer, plot=args.plot)
    answer = dataclasses.replace(answer, log=log.path)
    if args.json:
        print(json.dumps(calibration_json(answer), indent=2))
        return 0
    print(format_calibration(answer))
    if args.plot:
        print(f"plot: {args.plot}")
    print(f"log: {log.path}")
    return 0
