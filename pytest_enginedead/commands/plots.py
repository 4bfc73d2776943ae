"""``--plot``: step time against the batch, with the deadlines (needs matplotlib).
"""

from __future__ import annotations

import io
import os
from typing import Any

from ..harness.outputs import Output, claim
from ..logic.sizing import advice, kvcache, shapes
from ..logic.sizing import fit as fit_
from ..logic.timeouts.policies import TimeoutPolicy


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
        raise RuntimeError("--plot needs matplotlib: pip install matplotlib") from None
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


def plot_sizing(dest: Output | str, out: dict[str, Any]) -> None:
    """Step time against sequences, one line per context (the model), measured points, deadlines.

    Drawn in memory and written through the one writer (``outputs``), like ``plot``.
    """
    target = dest if isinstance(dest, Output) else claim(dest, repr(dest))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install matplotlib") from None
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    rows = out["results"]
    contexts = sorted({r["context_tokens"] for r in rows if not r["measured"]})
    terms = {k.removesuffix("_s"): v for k, v in out["fit"]["terms"].items()}
    model = fit_.Fit(terms)
    window = out["layout"]["sliding_window"]
    top = out["limits"]["max_num_seqs"]
    xs = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, top} & set(range(1, top + 1)) | {top})
    kv = out.get("kv_cache")
    cache = None
    if kv:
        held = kvcache.KvLayout(kv["layout"]["full_bytes_per_token"], kv["layout"]["sliding_bytes_per_token"],
                                kv["layout"]["window"])
        cache = kvcache.KvCache(kv["bytes"], held, kv["source"])
    for ctx in contexts:  # as far as the server's KV cache holds that many sequences at that context
        ns = [n for n in xs if cache is None
              or kvcache.held_bytes(shapes.StepPlan(n, ctx), cache.layout) <= cache.bytes]
        ys = [model.predict(shapes.StepPlan(n, ctx).step(window)) for n in ns]
        ax.plot(ns, ys, "-", label=f"model, decodes at {ctx} tokens of context")
    measured = [r for r in rows if r["measured"]]
    if measured:
        ax.plot([r["batch_size"] for r in measured], [r["p50_s"] for r in measured], "o", color="black",
                label="measured decode steps (p50)")
    lim = out["limits"]
    heaviest = [advice.worst_time(model, shapes.Limits(n, max(n, lim["max_num_batched_tokens"]),
                                                       lim["max_model_len"], lim.get("kv_cache_tokens")),
                                  window, cache)[1] for n in xs]
    ax.plot(xs, heaviest, "--", color="purple", label=f"worst step at each --max-num-seqs "
            f"({lim['max_num_batched_tokens']} tokens)")
    worst = out["worst_step"]
    ax.plot([worst["seqs"]], [worst["predicted_s"]], "*", markersize=12, color="purple",
            label="worst step the scheduler can form (model)")
    if worst.get("measured_s") is not None:
        ax.plot([worst["formed"]["seqs"]], [worst["measured_s"]], "P", markersize=10, color="purple",
                label="worst step, formed and measured")
    rec = out["recommend"]
    ax.axhline(rec["deadline_in_force_s"], color="red", linestyle=":",
               label=f"deadline in force ({rec['deadline_in_force_s']:g} s)")
    ax.axhline(rec["deadline_s"], color="green", linestyle="--", label=f"recommended ({rec['deadline_s']} s)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequences in the step")
    ax.set_ylabel("seconds")
    what = "forecast" if "forecast" in out else "measured and fitted"
    ax.set_title(f"enginedead calibrate: {os.path.basename(str(out.get('model', '')).rstrip('/'))} ({what})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    drawn = io.BytesIO()
    fig.savefig(drawn, format=os.path.splitext(target.path)[1].lstrip(".").lower() or None)
    plt.close(fig)
    target.write_bytes(drawn.getvalue())
