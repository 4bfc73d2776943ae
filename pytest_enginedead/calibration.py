"""``enginedead calibrate``: step time per batch size on this machine, and the deadlines to set.

One engine, sized for the largest batch, runs every batch size; step time is fitted
as ``a + b x batch`` and each recommended deadline is ``headroom x predicted step``,
clamped to [vLLM's stock 300 s, 2 h].
"""

from __future__ import annotations

import io
import math
import os
import statistics
from collections.abc import Sequence
from typing import Any

from . import compat
from .cleanup import Reaper
from .engine import Engine, Progress
from .outputs import Output, claim
from .planning import EngineSpec, Instructions
from .policy import STOCK_DEADLINE_S, Backend, TimeoutPolicy, fit_step_time


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


def measure(
    model: str, batch_sizes: Sequence[int], steps: int, progress: Progress | None = None, rounds: int = 4
) -> list[dict[str, Any]]:
    """Time ``steps`` decode steps per batch size, on one engine sized for the largest.

    Each size is warmed up first (not measured), then the sizes take turns in
    ``rounds`` rounds, the order reversed every other round, so that the machine's
    noise lands on all of them alike.  Prompts are one token, so a round's prefill step
    costs what a decode step of the same batch costs: every step measured is decode-sized.
    """
    sizes = list(batch_sizes)
    largest = max(sizes)
    deadline = TimeoutPolicy.reference().timeout_s(Backend.CPU, largest)
    engine = Engine(EngineSpec(model, largest), reaper=(reaper := Reaper()))
    measured: dict[int, list[float]] = {n: [] for n in sizes}
    per_round = max(1, math.ceil(steps / rounds))
    try:
        engine.start(Instructions(deadline, "calibration (reference policy)"), progress)
        for n in sizes:
            engine.generate(n, max_tokens=4, prompt_len=1)  # warm-up, not measured
        for r in range(rounds):
            if progress:
                progress(f"measuring round {r + 1}/{rounds}: batch sizes {', '.join(map(str, sizes))}")
            for n in sizes if r % 2 == 0 else reversed(sizes):
                seen = len(engine.steps())
                engine.generate(n, max_tokens=per_round + 1, prompt_len=1)
                measured[n] += [s.seconds for s in engine.steps()[seen:]
                                if s.seconds is not None and s.batch_size == n]
        start_s = engine.start_s
    finally:
        engine.stop()
        reaper.close()
    results = []
    for n in sizes:
        if not measured[n]:
            raise RuntimeError(f"no full decode step at batch {n} was recorded")
        results.append({
            "batch_size": n,
            "steps": len(measured[n]),
            "p50_s": statistics.median(measured[n]),
            "p99_s": _quantile(measured[n], 0.99),
            "max_s": max(measured[n]),
            "start_s": start_s,
        })
    return results


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
        f"{'batch':>5}  {'p50':>9}  {'p99':>9}  {f'stock {stock:g} s':>12}  recommended deadline",
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


def plot(out: Output | str, results: list[dict[str, Any]], stock: float, policy: TimeoutPolicy) -> None:
    """Step time against batch size, drawn in the format the file name's extension names.

    Drawn in memory and written through the one writer (``outputs``).
    """
    target = out if isinstance(out, Output) else claim(out, repr(out))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'pytest-enginedead[plot]'") from None
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
    drawn = io.BytesIO()
    fig.savefig(drawn, format=os.path.splitext(target.path)[1].lstrip(".").lower() or None)
    plt.close(fig)
    target.write_bytes(drawn.getvalue())
