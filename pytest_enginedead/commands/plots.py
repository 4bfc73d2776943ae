"""``--plot``: step time against the batch, with the deadlines (needs matplotlib).
"""

from __future__ import annotations

import io
import os
from typing import Any

from ..harness.outputs import Output, claim
from ..logic.sizing import advice, kvcache
from ..logic.sizing.answer import SizingAnswer
from ..logic.sizing.decode import Calibration
from ..logic.sizing.shapes import Limits, StepPlan


def plot(out: Output | str, answer: Calibration) -> None:
    """Step time against batch size, drawn in the format the file name's extension names.

    Drawn in memory from the typed answer and written through the one writer (``outputs``).
    """
    target = out if isinstance(out, Output) else claim(out, repr(out))
    plt = _pyplot()
    sizes = [r.measured.batch_size for r in answer.rows]
    stock = answer.rows[0].stock_deadline_s if answer.rows else 300.0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(sizes, [r.measured.p50_s for r in answer.rows], "o-", label="step time p50")
    ax.plot(sizes, [r.measured.p99_s for r in answer.rows], "s--", label="step time p99")
    ax.axhline(stock, color="red", linestyle=":", label=f"vLLM stock deadline ({stock:g} s)")
    ax.plot(sizes, [r.recommended_s for r in answer.rows], "^-", color="green", label="recommended deadline")
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


def plot_sizing(dest: Output | str, answer: SizingAnswer) -> None:
    """Step time against sequences, one line per context (the model), measured points, deadlines.

    Drawn in memory from the typed answer and written through the one writer (``outputs``), like ``plot``.
    """
    target = dest if isinstance(dest, Output) else claim(dest, repr(dest))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    top = answer.limits.max_num_seqs
    xs = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, top} & set(range(1, top + 1)) | {top})
    _model_lines(ax, answer, xs)
    _worst_lines(ax, answer, xs)
    ax.axhline(answer.deadline_s, color="red", linestyle=":",
               label=f"deadline in force ({answer.deadline_s:g} s)")
    ax.axhline(answer.advice.recommended_s, color="green", linestyle="--",
               label=f"recommended ({answer.advice.recommended_s} s)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequences in the step")
    ax.set_ylabel("seconds")
    what = "forecast" if answer.is_forecast else "measured and fitted"
    ax.set_title(f"enginedead calibrate: {os.path.basename(answer.model.rstrip('/'))} ({what})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    drawn = io.BytesIO()
    fig.savefig(drawn, format=os.path.splitext(target.path)[1].lstrip(".").lower() or None)
    plt.close(fig)
    target.write_bytes(drawn.getvalue())


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install matplotlib") from None
    return plt


def _model_lines(ax: Any, answer: SizingAnswer, xs: list[int]) -> None:
    """Per context of the table, the model's decode steps as far as the server's KV cache holds them,
    and the decode steps measured."""
    cache = answer.kv
    for ctx in sorted({r.context_tokens for r in answer.rows if r.measured is None}):
        ns = [n for n in xs
              if cache is None or kvcache.held_bytes(StepPlan(n, ctx), cache.layout) <= cache.bytes]
        ys = [answer.fit.predict(StepPlan(n, ctx).step(answer.window)) for n in ns]
        ax.plot(ns, ys, "-", label=f"model, decodes at {ctx} tokens of context")
    measured = [r for r in answer.rows if r.measured is not None]
    if measured:
        ax.plot([r.batch_size for r in measured], [r.measured.p50_s for r in measured if r.measured], "o",
                color="black", label="measured decode steps (p50)")


def _worst_lines(ax: Any, answer: SizingAnswer, xs: list[int]) -> None:
    """The worst step at each --max-num-seqs, the worst step at the limits, and as formed."""
    lim = answer.limits
    heaviest = []
    for n in xs:
        at = Limits(n, max(n, lim.max_num_batched_tokens), lim.max_model_len, lim.kv_cache_tokens)
        heaviest.append(advice.worst_time(answer.fit, at, answer.window, answer.kv)[1])
    ax.plot(xs, heaviest, "--", color="purple", label=f"worst step at each --max-num-seqs "
            f"({lim.max_num_batched_tokens} tokens)")
    worst = answer.worst
    ax.plot([worst.step.seqs], [worst.predicted_s], "*", markersize=12, color="purple",
            label="worst step the scheduler can form (model)")
    if worst.formed is not None:
        ax.plot([worst.formed.step.seqs], [worst.formed.measured_s], "P", markersize=10, color="purple",
                label="worst step, formed and measured")
