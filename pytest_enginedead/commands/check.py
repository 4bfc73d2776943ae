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

from ..compat import versions
from ..contract.names import CHECK_PROGRESS_ENV, GUARD_VARIABLES
from ..harness import outputs
from ..harness.outputs import Output
from ..logic import checking, planning
from ..logic.fingerprint import preload_note, this_machine
from ..logic.guardconfig import DEFAULT_HANG_S
from ..logic.optiontable import OPTIONS
from ..logic.policy import PolicyError, load_policy, policy_name
from ..logic.values import DEFAULT_BATCH_SIZES, BadValue
from .common import Refused, add_engine_flags, deadline, policy, positive_int, run_claimed, say
from .preflight import preflight

EPILOG = ("exit status: 0 no false death under the policy (or the guard) and every planned run ran; "
          "1 a false death under the policy or the guard, or a run that failed or did not run; 2 bad usage, "
          "nothing started; 130 interrupted.  The stock runs' false deaths are vLLM's behaviour shown, not a "
          "failure.  Reads: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (the stock deadline off the bundled model), "
          "ENGINEDEAD_BUSY_THRESHOLD, ENGINEDEAD_SAMPLE_INTERVAL, ENGINEDEAD_GUARD* (checked, then cleared "
          "for the runs), VLLM_PLUGINS, LD_PRELOAD (the engines inherit it), TMPDIR (the log).")


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
                       f"else {versions.DEADLINE_ENV} or 300")
    check.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                       help="extra arguments for pytest, after --")


def run(args: argparse.Namespace) -> int:
    claimed = preflight(args, before_model=_check_inputs)
    return run_claimed(args, claimed, run_check)


def _check_inputs(args: argparse.Namespace) -> None:
    check_inherited_settings()
    check_policy(args.policy, args.batch_sizes)


#: options the regression run reads from the environment, since the check passes no flag for them
#: (not the guard: the check decides which runs are guarded, see ``regression_environment``)
INHERITED = ("enginedead_busy_threshold", "enginedead_sample_interval")


def check_inherited_settings() -> None:
    for opt in OPTIONS:
        raw = os.environ.get(opt.env)
        if opt.name in INHERITED and raw is not None:
            try:
                opt.parse(raw)
            except BadValue as exc:
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


def check_policy(spec: str, batch_sizes: Sequence[int]) -> None:
    """The policy loads, and gives every batch size a deadline vLLM can use."""
    try:
        loaded = load_policy(spec, [os.getcwd()])
        for n in batch_sizes:
            planning.policy_deadline(loaded, policy_name(loaded, spec), n)
    except (PolicyError, planning.PolicyFailure) as exc:
        raise Refused(f"--policy {spec!r}: {exc}") from None


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
        say(
            f"enginedead check: vLLM {versions.installed_version()}, model {args.model}, "
            f"{'API server, ' if plan.server else ''}stock deadline {plan.stock_s} s, policy {args.policy}"
            + (", guard on" if plan.guard else "")
            + (f", injected busy step {plan.slow_s_per_seq:g} s per sequence" if plan.slow_s_per_seq else "")
            + f"; {runs} runs; {preload_note(this_machine()['preloads'])}"
        )
        if cleared:
            say(f"enginedead check: cleared {', '.join(cleared)} inherited from the environment: the stock "
                "and policy runs are unguarded" + (
                    f", the guard run has policy {args.policy} and hang_s {DEFAULT_HANG_S:g} s"
                    if plan.guard else " (--guard adds a guarded run)"))
        code, tail = run_logged(cmd, env, log, args.verbose, progress)
        return verdict(args, report, code, log.path, tail, claimed.get("report"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


#: pytest's exit status for a usage error (pytest.ExitCode.USAGE_ERROR)
USAGE_ERROR = 4


def usage_error(tail: bytes) -> str | None:
    """The ``ERROR: ...`` line pytest printed when it refused its arguments, if it did."""
    lines = tail.decode(errors="replace").splitlines()
    found = [ln for ln in lines if ": error: " in ln]  # argparse: "pytest: error: unrecognized ..."
    found += [ln for ln in lines if ln.startswith("ERROR: ") and not ln.startswith("ERROR: usage:")]
    if found:
        return found[0].removeprefix("ERROR: ").strip()
    return None


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


def _show_progress(path: str, shown: int) -> int:
    """Print the progress events not shown yet; return how many are shown now."""
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        lines = f.read().splitlines()
        for line in lines[shown:]:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                say(checking.progress_line(json.loads(line)))
        return len(lines)
    return shown


def verdict(
    args: argparse.Namespace, report: str, code: int, log_path: str, tail: bytes, out: Output | None
) -> int:
    if not os.path.exists(report):
        refusal = usage_error(tail) if code == USAGE_ERROR else None
        if refusal is not None:  # pytest refused the run before it began (e.g. extra arguments)
            print(f"enginedead check: error: pytest refused the run: {refusal}", file=sys.stderr)
            return 2
        say(f"enginedead check: pytest exited {code} before writing a report; see {log_path}")
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
    code = judged(args, data, code, log_path)
    if unwritten is not None:  # proven writable at the start; it changed since
        print(f"enginedead check: error: the report was not written: {unwritten}", file=sys.stderr)
        return code or 2
    return code


def judged(args: argparse.Namespace, data: dict[str, Any], code: int, log_path: str) -> int:
    """The verdict table and line; the exit status they give."""
    rows = checking.rows_from_report(data)
    say("")
    say(checking.format_table(rows))
    say("")
    restarts = data.get("restarts", 0)
    say(f"engines started: {data.get('engines_started')} ({restarts} restart(s) after a death); "
        f"log: {log_path}")
    plan = checking.plan_for(args.model, args.batch_sizes, args.stock_deadline, args.max_tokens,
                             guard=args.guard, server=args.server)
    line, verdict = checking.verdict_line(rows, plan, args.policy, args.batch_sizes)
    say(line)
    return code if verdict == 0 and code not in (0, 1) else verdict  # 0/1 pytest's; else its own
