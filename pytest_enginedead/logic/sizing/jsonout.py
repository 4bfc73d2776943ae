"""The sizing answer as JSON (``enginedead calibrate --json``): the one place it becomes a dict.

The keys the outside reads (DESIGN.md): ``fit.terms``, ``fit.worst_residual``,
``worst_step.{seqs,tokens,context_tokens,predicted_s,measured_s}``,
``recommend.{deadline_s,max_num_seqs_under_deadline,max_num_batched_tokens_under_deadline}``,
``results[].{batch_size,p50_s,forecast}``.  Pure.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .answer import ContextsSeen, EngineRecord, Repeats, SizingAnswer, TableRow, WorstStep
from .fit import LEVEL, Fit, Residual
from .forecast import Forecast


def fit_json(fit: Fit, tied: bool) -> dict[str, Any]:
    u = fit.uncertainty
    return {
        "terms": {f"{t}_s": v for t, v in fit.terms.items()},
        "form": " + ".join("fixed" if t == "fixed" else f"{t} x {t.removeprefix('per_')}s"
                           for t in fit.terms),
        "routing": None if fit.routing is None else fit.routing.as_dict(),
        "worst_residual": fit.worst_residual,
        "worst_residual_step": None if fit.worst is None else residual_json(fit.worst),
        "groups": fit.groups,
        "steps": fit.steps,
        "origin": fit.origin,
        "uncertainty": None if u is None else {
            "z": u.z, "level": LEVEL, "step_spread": u.spread, "misfit": u.misfit,
            "terms_sd": {f"{t}_s": v for t, v in u.term_sd().items()}},
        "context_terms_tied": tied,
    }


def residual_json(r: Residual) -> dict[str, Any]:
    out: dict[str, Any] = {**r.step.as_dict(), "measured_s": r.measured_s, "predicted_s": r.predicted_s}
    if r.measured_on:
        out["measured_on"] = r.measured_on
    return out


def worst_json(w: WorstStep) -> dict[str, Any]:
    out: dict[str, Any] = {
        **w.step.as_dict(), "plan": w.plan.as_dict(), "predicted_s": w.predicted_s,
        "interval_s": list(w.interval_s), "upper_s": w.upper_s, "measured_s": w.measured_s,
        "stock_fires": w.stock_fires, "forecast": w.forecast,
        "binding": list(w.binding), "kv_cache_held_bytes": w.kv_cache_held_bytes,
        "kv_cache_bytes": w.kv_cache_bytes,
    }
    if w.formed is not None:
        out["formed"] = {**w.formed.step.as_dict(), "measured_s": w.formed.measured_s,
                         "predicted_s": w.formed.predicted_s}
    if w.note is not None:
        out["note"] = w.note
    return out


def row_json(r: TableRow) -> dict[str, Any]:
    m = r.measured
    out: dict[str, Any] = {
        "batch_size": r.batch_size, "context_tokens": r.context_tokens, "steps": 0 if m is None else m.steps,
        "p50_s": r.predicted_s if m is None else m.p50_s, "p99_s": r.predicted_s if m is None else m.p99_s,
        "max_s": r.predicted_s if m is None else m.max_s, "predicted_s": r.predicted_s,
        "measured": m is not None, "forecast": r.forecast, "stock_fires": r.stock_fires,
        "recommended_s": r.recommended_s,
    }
    if r.interval_s is not None:
        out["interval_s"] = list(r.interval_s)
    if r.fits_kv_cache is not None:
        out["fits_kv_cache"] = r.fits_kv_cache
    return out


def forecast_json(fc: Forecast) -> dict[str, Any]:
    c = fc.coefficients
    return {
        "depth_independent": {"fixed_s": c["fixed"], "per_seq_s": c["per_seq"],
                              "per_token_s": c["per_token"]},
        "per_layer": {t: dataclasses.asdict(cost) for t, cost in fc.per_layer().items()},
        "floors": {t: {"per_context_token_s": ctx, "per_read_token_s": read}
                   for t, (ctx, read) in fc.floors_at().items()},
        "rates": None if fc.rates is None else fc.rates.as_dict(),
        "context_terms_tied": fc.tied,
        "reads_tied": True,
    }


def engine_json(e: EngineRecord) -> dict[str, Any]:
    return {"label": e.label, "depth": e.depth, "start_s": e.start_s, "memory_bytes": e.memory_bytes,
            "kv_cache_gib": e.kv_cache_gib, "steps": e.steps,
            "recorded": {name: [[*s.as_dict().values(), t] for s, t in steps]
                         for name, steps in e.recorded.items()}}


def contexts_json(c: ContextsSeen) -> dict[str, Any]:
    return {name: {"shortest": span.shortest, "longest": span.longest, "factor": span.factor}
            for name, span in (("decode", c.decode), ("prefill", c.prefill))}


def repeats_json(r: Repeats) -> dict[str, Any]:
    rounds = [{"round": e.round, "predicted_s": e.predicted_s, "interval_s": list(e.interval_s),
               "plan": e.plan.describe(), "terms": {f"{t}_s": v for t, v in e.fit.terms.items()}}
              for e in r.rounds]
    return {"rounds": rounds, "worst_predicted_s": r.worst_predicted_s, "spread": r.spread}


def answer_json(a: SizingAnswer) -> dict[str, Any]:
    """The answer as ``--json`` prints it."""
    out: dict[str, Any] = {
        "vllm": a.vllm, "model": a.model, "machine": a.machine, "limits": a.limits.as_dict(),
        "tensor_parallel_size": a.tensor_parallel,
        "layout": {"layers": a.layout.depth, "sliding_window": a.window,
                   "layer_types": {t: a.layout.count(t) for t in a.layout.types}},
        "headroom": a.headroom, "fit": fit_json(a.fit, a.tied), "worst_step": worst_json(a.worst),
        "recommend": a.advice.as_dict(), "results": [row_json(r) for r in a.rows],
        "engines": [engine_json(e) for e in a.engines], "contexts_measured": contexts_json(a.contexts),
    }
    if a.is_forecast and a.joint is not None:
        out["forecast"] = forecast_json(a.joint)
    if a.kv is not None:
        out["kv_cache"] = a.kv.as_dict(a.limits.max_model_len, a.limits.max_num_batched_tokens)
    if a.repeats is not None:
        out["repeats"] = repeats_json(a.repeats)
    if a.moe_kernel is not None:
        out["moe_kernel"] = {"line": a.moe_kernel.line, "sizes": dict(a.moe_kernel.sizes)}
    for key in ("wall_s", "plot", "log"):
        if getattr(a, key) is not None:
            out[key] = getattr(a, key)
    return out
