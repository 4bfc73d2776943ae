"""``enginedead check``: the bundled regression suite against the installed vLLM, and its verdict.

Each batch size runs under vLLM's stock deadline and under the policy (and with ``--guard``
under the stock deadline with the guard on), in an inner pytest run of
``pytest_enginedead.regression``; the table and one verdict line follow.  Exit 1 exactly
when a false death happens under the policy (or under the guard).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from ..compat import llm_config, versions
from ..contract.judge import STALL_FLOOR_S
from ..contract.names import CHECK_PROGRESS_ENV, GUARD_VARIABLES
from ..harness import outputs
from ..harness.engines.server import has_tokenizer
from ..harness.outputs import Output
from ..logic import releases
from ..logic.inputs.arguments import BadMarker, fits_context
from ..logic.inputs.guardconfig import DEFAULT_HANG_S
from ..logic.inputs.modelconfig import model_name
from ..logic.inputs.values import DEFAULT_BATCH_SIZES
from ..logic.machine import preload_note, this_machine
from ..logic.reporting import checkevents, checking
from ..logic.timeouts.policies import PolicyError, PolicyFailure, load_policy, policy_deadline, policy_name
from ..logic.words import plural
from .common import (
    GUARD_SWITCH,
    Refused,
    add_engine_flags,
    add_ranks,
    check_environment_options,
    deadline,
    policy,
    positive_int,
    run_claimed,
    say,
)
from .preflight import preflight, refuse_batch_sizes
from .pytestargs import (
    INFORMATION,
    NO_RUN,
    NO_TESTS,
    NO_VERDICT,
    USAGE_ERROR,
    asked_for,
    selection,
    tried,
    usage_error,
)

EPILOG = ("exit status: 0 no false death under the policy (or the guard), the spinning worker (--spin) "
          "judged hung, and every planned run ran; 1 a false death under the policy or the guard, a spinning "
          "worker not judged hung, or a run that failed or did not run; 2 bad usage, "
          "nothing started (pytest refusing the arguments after --, or their selecting none of the planned "
          "runs, e.g. -k nomatch); 5 no verdict: -- --collect-only (or --setup-plan) lists the planned runs "
          "and runs none; 130 interrupted.  -- --help (or --version, --markers, --fixtures) prints pytest's "
          "own and exits with its status.  The stock runs' false deaths are vLLM's behaviour shown, not a "
          "failure.  Reads: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (the stock deadline off the bundled model), "
          "ENGINEDEAD_BUSY_THRESHOLD, ENGINEDEAD_SAMPLE_INTERVAL, ENGINEDEAD_GUARD (checked as the "
          "plugin reads it) and ENGINEDEAD_GUARD* (cleared for the runs), VLLM_PLUGINS (it must name "
          "enginedead), LD_PRELOAD (the engines inherit it), TMPDIR (the log).")


def add_parser(sub: Any, verbose: bool) -> None:
    check = sub.add_parser("check",
                           help="see the false death on the bundled model: stock vLLM against your policy",
                           description="Run each batch size under vLLM's stock deadline and under the "
                           "policy (and with --guard, under the stock deadline with the guard on); print the "
                           "verdict table and one line naming each run.", epilog=EPILOG)
    check.verbose = verbose
    add_engine_flags(check, DEFAULT_BATCH_SIZES)
    check.add_argument("--policy", type=policy, default="reference",
                       help="reference, vllm-stock or module:attr (default: reference)")
    check.add_argument("--guard", action="store_true",
                       help="also run each batch size under the stock deadline with the guard on")
    check.add_argument("--spin", action="store_true",
                       help="also run each batch size with a worker that spins at a whole core in its step "
                       "without finishing a layer, under a deadline past the stall window "
                       f"({checking.SPIN_MARGIN_S + int(STALL_FLOOR_S)} s): it must be judged hung (a "
                       "genuine death); judged computing, this vLLM's layers are not seen")
    check.add_argument("--server", action="store_true",
                       help="drive vLLM's OpenAI API server with concurrent clients "
                       "instead of offline engines")
    check.add_argument("--report", metavar="PATH",
                       help="also write the JSON report here")
    check.add_argument("--max-tokens", type=positive_int, default=2, metavar="N",
                       help="tokens per sequence (default 2)")
    check.add_argument("--deadline", "--stock-deadline", dest="stock_deadline", type=deadline,
                       metavar="SECONDS",
                       help="vLLM's deadline to test against, whole seconds; default: "
                       f"{checking.BUNDLED_STOCK_S} s on the bundled model (time-compressed), "
                       f"else {releases.DEADLINE_ENV} or 300")
    add_ranks(check)
    check.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                       help="extra arguments for pytest, after --")


def run(args: argparse.Namespace) -> int:
    planned: list[checking.CheckPlan] = []  # built once vLLM's environment and the model are checked

    def check_runs(args: argparse.Namespace) -> None:
        planned.append(plan_of(args))
        _check_runs(args, planned[0])

    claimed = preflight(args, before_model=_check_inputs, after_model=check_runs, server=args.server)
    return run_claimed(args, claimed, lambda args, claimed: run_check(args, claimed, planned[0]))


def plan_of(args: argparse.Namespace) -> checking.CheckPlan:
    """The plan of the runs the arguments ask for: built once; the runs, their checks and the verdict
    read it."""
    return checking.plan_for(args.model, args.batch_sizes, args.stock_deadline, args.max_tokens,
                             guard=args.guard, server=args.server, spin=args.spin)


def _check_inputs(args: argparse.Namespace) -> None:
    check_environment_options(INHERITED)
    check_policy(args.policy, args.batch_sizes)


def _check_runs(args: argparse.Namespace, plan: checking.CheckPlan) -> None:
    """Each run fits the engine it starts on: its batch size within what vLLM builds and this machine
    holds; its prompt and ``--max-tokens`` within the harness's max_model_len (as the handles ask)."""
    refuse_batch_sizes(args, args.server)
    bos = args.server and has_tokenizer(args.model)
    room = llm_config.DEFAULT_MAX_MODEL_LEN - plan.prompt_len - int(bos)
    try:
        fits_context(f"--max-tokens {args.max_tokens}", plan.prompt_len, args.max_tokens,
                     llm_config.DEFAULT_MAX_MODEL_LEN, bos, remedy=f"give --max-tokens {room} or fewer")
    except BadMarker as exc:
        raise Refused(str(exc)) from None


#: options the regression run reads from the environment, since the check passes no flag for them,
#: and the guard's switch: refused as the plugin refuses it, then cleared (the check decides which
#: runs are guarded, see ``regression_environment``; the guard's other variables the plugin never reads)
INHERITED = ("enginedead_busy_threshold", "enginedead_sample_interval", *GUARD_SWITCH)


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


def check_policy(spec: str, batch_sizes: Sequence[int]) -> None:
    """The policy loads, and gives every batch size a deadline vLLM can use."""
    try:
        loaded = load_policy(spec, [os.getcwd()], versions.installed_version())
        for n in batch_sizes:
            policy_deadline(loaded, policy_name(loaded, spec), n)
    except (PolicyError, PolicyFailure) as exc:
        raise Refused(f"--policy {spec!r}: {exc}") from None


def run_check(args: argparse.Namespace, claimed: dict[str, Output], plan: checking.CheckPlan) -> int:
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
            f"--enginedead-tensor-parallel-size={args.tensor_parallel_size}",
            *args.pytest_args,
        ]
        runs = len(args.batch_sizes) * len(plan.modes)
        if asked_for(args.pytest_args, (*INFORMATION, *NO_RUN)):
            return passed_through(args, cmd, env, log)
        if args.pytest_args:  # tried by a collection first: refused before the header, nothing started
            planned = (f"{runs} planned runs ({', '.join(m.value for m in plan.modes)} at batch "
                       f"{', '.join(map(str, args.batch_sizes))})")
            problem = tried([a for a in cmd if not a.startswith("--enginedead-report=")], env,
                            args.pytest_args, planned)
            if problem:
                raise Refused(problem)
        report_progress(
            f"enginedead check: vLLM {versions.installed_version()}, model {model_name(args.model)}, "
            f"{'API server, ' if plan.server else ''}"
            + (f"{args.tensor_parallel_size} ranks, " if args.tensor_parallel_size > 1 else "")
            + f"stock deadline {plan.stock_s} s, policy {args.policy}"
            + (", guard on" if plan.guard else "")
            + (f", a spinning worker under {plan.spin_deadline_s} s" if plan.spin else "")
            + (f", injected busy step {plan.slow_s_per_seq:g} s per sequence" if plan.slow_s_per_seq else "")
            + f"; {plural(runs, 'run')}; {preload_note(this_machine()['preloads'])}"
        )
        if cleared:
            report_progress(
                f"enginedead check: cleared {', '.join(cleared)} inherited from the environment: the stock "
                "and policy runs are unguarded" + (
                    f", the guard run has policy {args.policy} and hang_s {DEFAULT_HANG_S:g} s"
                    if plan.guard else " (--guard adds a guarded run)"))
        code, tail = run_logged(cmd, env, log, args.verbose, progress)
        return verdict(args, plan, report, code, log, tail, claimed.get("report"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def passed_through(args: argparse.Namespace, cmd: list[str], env: dict[str, str], log: Output) -> int:
    """pytest's own output on the terminal, for arguments that ask for no run: information
    (``--help``: pytest's exit status) or the planned runs listed (``--collect-only``: no
    verdict, ``NO_VERDICT``).  No engine starts and no log is kept."""
    log.discard()
    code = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, check=False).returncode
    if asked_for(args.pytest_args, INFORMATION) or code == USAGE_ERROR:
        return 2 if code == USAGE_ERROR else code
    print(f"enginedead check: {asked_for(args.pytest_args, NO_RUN)} lists the planned runs; none ran, "
          f"so there is no verdict (exit {NO_VERDICT})", file=sys.stderr)
    return NO_VERDICT


#: how much of the run's output the command keeps to read pytest's refusal from (the log may be /dev/null)
TAIL_BYTES = 20000


def run_logged(
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


def report_progress(message: str) -> None:
    """A line of what the check is doing, on stderr (the table and the verdict go to stdout)."""
    print(message, file=sys.stderr, flush=True)


def _show_progress(path: str, shown: int) -> int:
    """Print the progress events not shown yet (a run's result, or a note on an engine's start);
    return how many are shown now."""
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        lines = f.read().split("\n")[:-1]  # a line still being written has no newline yet
        for line in lines[shown:]:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                report_progress(checkevents.read_event(line).line())
        return len(lines)
    return shown


def verdict(
    args: argparse.Namespace, plan: checking.CheckPlan, report: str, code: int, log: Output, tail: bytes,
    out: Output | None,
) -> int:
    log_path = log.path
    if not os.path.exists(report):
        refusal = usage_error(tail) if code == USAGE_ERROR else None
        if refusal is not None:  # pytest refused the run before it began (e.g. extra arguments)
            if args.log is None:
                log.discard()  # the log of a run refused before it began holds only the refusal
            print(f"enginedead check: error: pytest refused the run: {refusal}", file=sys.stderr)
            return 2
        print(f"enginedead check: pytest exited {code} before writing a report; see {log_path}",
              file=sys.stderr)
        return code or 1
    with open(report, "rb") as f:
        raw = f.read()
    data = json.loads(raw)
    if code == NO_TESTS and not data.get("tests"):  # everything deselected: no run, no verdict
        if args.log is None:
            log.discard()
        print(f"enginedead check: error: {selection(args.pytest_args)} selected none of the planned runs; "
              "nothing ran", file=sys.stderr)
        return 2
    unwritten = None
    if out is not None:
        try:
            out.write_bytes(raw)
        except outputs.OutputError as exc:
            unwritten = str(exc)
    code = judged(args, plan, data, code, log_path)
    if unwritten is not None:  # proven writable at the start; it changed since
        print(f"enginedead check: error: the report was not written: {unwritten}", file=sys.stderr)
        return code or 2
    return code


def judged(args: argparse.Namespace, plan: checking.CheckPlan, data: dict[str, Any], code: int,
           log_path: str) -> int:
    """The verdict table and line; the exit status they give."""
    rows = checking.rows_from_report(data)
    say("")
    say(checking.format_table(rows))
    say("")
    restarts = data.get("restarts", 0)
    say(f"engines started: {data.get('engines_started')} ({plural(restarts, 'restart')} after a death); "
        f"log: {log_path}")
    for path in checking.slow_paths_of(data):
        say(f"slow path: {path}")
    line, verdict = checking.verdict_line(rows, plan, args.policy, args.batch_sizes)
    say(line)
    return code if verdict == 0 and code not in (0, 1) else verdict  # 0/1 pytest's; else its own
