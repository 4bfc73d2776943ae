"""What a sizing run found: the fitted step model, the worst step, the advice, as data and as text.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...contract.steps import StepTime
from ..machine import preload_note, this_machine
from ..timeouts.policies import STOCK_DEADLINE_S
from . import advice, shapes, slices
from . import fit as fit_
from .forecast import Forecast, fit_slices
from .plan import EnginePlan, SizingPlan


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


@dataclass
class Measured:
    """What one engine recorded: steps per run, and its start time."""

    plan: EnginePlan
    runs: dict[str, list[StepTime]]
    start_s: float | None = None
    worst_formed: tuple[fit_.Step, float] | None = None
    worst_note: str | None = None


def to_step(s: StepTime) -> fit_.Step | None:
    if s.seconds is None or s.tokens is None or s.context_tokens is None:
        return None
    return fit_.Step(s.batch_size, s.tokens, s.context_tokens, s.window_context_tokens)


def samples_of(steps: Iterable[StepTime]) -> list[tuple[fit_.Step, float]]:
    out = []
    for s in steps:
        step = to_step(s)
        if step is not None and s.seconds is not None:
            out.append((step, s.seconds))
    return out


def fit_of(plan: SizingPlan, measured: Sequence[Measured]) -> Forecast:
    parts = [(m.plan.layout, samples_of(s for name, steps in m.runs.items() if name != WORST for s in steps))
             for m in measured]
    origin = None if plan.forecast else "measured"
    return fit_slices(parts, plan.layout, plan.config, origin)


WORST = "worst step"


def duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def sizing_result(plan: SizingPlan, measured: Sequence[Measured], headroom: float,
                  deadline_s: float, vllm_version: str | None = None) -> dict[str, Any]:
    """The numbers the command prints and its JSON carries (pure, given what was measured)."""
    fc = fit_of(plan, measured)
    fitted = fc.fit
    adv = advice.advise(fitted, plan.limits, plan.window, headroom, deadline_s,
                        shapes.model_max_len(plan.config))
    worst_step = adv.worst.step(plan.window)
    worst: dict[str, Any] = {
        **worst_step.as_dict(), "plan": adv.worst.as_dict(), "predicted_s": adv.worst_s, "measured_s": None,
        "stock_fires": adv.worst_s > STOCK_DEADLINE_S, "forecast": plan.forecast,
    }
    main = measured[-1]
    if plan.validate_note:
        worst["note"] = plan.validate_note
    elif main.worst_formed is not None:
        shape, seconds = main.worst_formed
        worst["measured_s"] = seconds
        worst["formed"] = {**shape.as_dict(), "measured_s": seconds, "predicted_s": fitted.predict(shape)}
    elif plan.validate:
        worst["note"] = main.worst_note
    else:
        worst["note"] = "not formed (--no-validate)"
    if plan.forecast:
        worst["note"] = "a forecast: the full-depth model was not run"
    out: dict[str, Any] = {
        "vllm": vllm_version,
        "model": plan.model,
        "machine": this_machine(),
        "limits": plan.limits.as_dict(),
        "tensor_parallel_size": plan.tensor_parallel,
        "layout": {"layers": plan.layout.depth, "sliding_window": plan.window,
                   "layer_types": {t: plan.layout.count(t) for t in plan.layout.types}},
        "headroom": headroom,
        "fit": {**fitted.as_dict(), "context_terms_tied": fc.tied},
        "worst_step": worst,
        "recommend": adv.as_dict(),
        "results": _rows(plan, measured, fitted, adv, headroom),
        "engines": [{"label": m.plan.label, "depth": m.plan.depth, "start_s": m.start_s,
                     "memory_bytes": m.plan.memory.total, "kv_cache_gib": m.plan.kv_cache_gib,
                     "steps": sum(len(v) for v in m.runs.values())} for m in measured],
    }
    if plan.forecast:
        out["forecast"] = fc.as_dict(plan.layout)
    return out


#: batch sizes the table answers for, beside those measured (the report's question)
REPORT_BATCHES = (8, 64, 128)


def _rows(plan: SizingPlan, measured: Sequence[Measured], fitted: fit_.Fit, adv: advice.Advice,
          headroom: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def judge(row: dict[str, Any], seconds: float) -> dict[str, Any]:
        row["stock_fires"] = seconds > STOCK_DEADLINE_S
        row["recommended_s"] = float(max(STOCK_DEADLINE_S, math.ceil(headroom * seconds)))
        return row

    if not plan.forecast:
        for n in plan.batch_sizes:
            steps = [s for s in measured[-1].runs.get(f"decode batch {n}", [])
                     if s.seconds is not None and s.batch_size == n and s.tokens == n]
            times = [s.seconds for s in steps if s.seconds is not None]
            if not times:
                continue
            shape = to_step(steps[len(steps) // 2])
            ctx = round(shape.context_tokens / n) if shape else 0
            rows.append(judge({
                "batch_size": n, "context_tokens": ctx, "steps": len(times),
                "p50_s": statistics.median(times), "p99_s": quantile(times, 0.99), "max_s": max(times),
                "predicted_s": fitted.predict(shape) if shape else None, "measured": True, "forecast": False,
            }, max(times)))
    top = max(1, plan.limits.max_model_len - 1)
    contexts = sorted({min(1024, top), top})
    batches = sorted({n for n in (*REPORT_BATCHES, *plan.batch_sizes, plan.limits.max_num_seqs)
                      if n <= plan.limits.max_num_seqs})
    for ctx in contexts:
        for n in batches:
            decode = shapes.StepPlan(n, ctx).step(plan.window)
            seconds = fitted.predict(decode)
            rows.append(judge({
                "batch_size": n, "context_tokens": ctx, "steps": 0, "p50_s": seconds, "p99_s": seconds,
                "max_s": seconds, "predicted_s": seconds, "measured": False, "forecast": plan.forecast,
            }, seconds))
    return rows


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 100:
        return f"{seconds:,.0f} s"
    return f"{seconds:.3g} s"


def format_sizing(out: dict[str, Any]) -> str:
    """What a person reads: the fit, the table, the worst step, what to set."""
    lim, fit, worst, rec = out["limits"], out["fit"], out["worst_step"], out["recommend"]
    stock = rec["deadline_in_force_s"]
    name = os.path.basename(str(out.get("model", "")).rstrip("/"))
    m = out.get("machine", {})
    cores, mem = m.get("cores"), (m.get("memory_bytes") or 0) / slices.GIB
    lines = [
        f"{name} on vLLM {out.get('vllm')}, this machine ({cores} cores, {mem:.0f} GiB): "
        f"--max-num-seqs {lim['max_num_seqs']} --max-num-batched-tokens {lim['max_num_batched_tokens']} "
        f"--max-model-len {lim['max_model_len']}"
        + (f" --kv-cache-tokens {lim['kv_cache_tokens']}" if lim.get("kv_cache_tokens") else "")
        + (f" --tensor-parallel-size {out['tensor_parallel_size']}" if out.get("tensor_parallel_size", 1) > 1
           else ""),
        preload_note(m.get("preloads")),
    ]
    if "forecast" in out:
        f = out["forecast"]
        dep = f["depth_independent"]
        lines.append(f"forecast to {out['layout']['layers']} layers from depth slices: depth-independent "
                     f"{dep['fixed_s']:.4g} s + {dep['per_seq_s']:.4g} s/seq + "
                     f"{dep['per_token_s']:.4g} s/token; per layer:")
        for kind, t in f["per_layer"].items():
            lines.append(f"  {kind:<24} {t['fixed_s']:.4g} s + {t['per_token_s']:.4g} s/token + "
                         f"{t['per_context_token_s']:.4g} s/context token")
        if f["context_terms_tied"]:
            lines.append("  (the layer types' context terms are tied by their attention work per key: "
                         "the measured contexts could not tell them apart)")
    worst_at = fit.get("worst_residual_step") or {}
    lines.append(f"step model ({fit['origin']}, {fit['steps']} steps in {fit['groups']} groups; worst "
                 f"residual {fit['worst_residual'] * 100:.0f} % at {worst_at.get('seqs')} seqs, "
                 f"{worst_at.get('tokens')} tokens, {worst_at.get('context_tokens')} context tokens):")
    for term, value in fit["terms"].items():
        key = term.removesuffix("_s")
        lines.append(f"  {key:<25} {value:10.4g}  {fit_.TERM_UNITS.get(key, '')}")
    head = f"stock {stock:g} s"
    lines.append(f"{'batch':>5}  {'context':>7}  {'measured p50':>12}  {'model':>9}  {head:>12}")
    for r in out["results"]:
        measured = _s(r["p50_s"]) if r["measured"] else ("forecast" if r["forecast"] else "-")
        fires = "FIRES" if r["stock_fires"] else "ok"
        lines.append(f"{r['batch_size']:>5}  {r['context_tokens']:>7}  {measured:>12}  "
                     f"{_s(r['predicted_s']):>9}  {fires:>12}")
    lines.append(f"worst step the scheduler can form: {shapes.StepPlan.from_dict(worst['plan']).describe()} "
                 f"({worst['seqs']} seqs, {worst['tokens']} tokens, "
                 f"{worst['context_tokens']:,} context tokens)")
    measured_text = (f"measured {_s(worst['measured_s'])} (formed: {worst['formed']['seqs']} seqs, "
                     f"{worst['formed']['tokens']} tokens, "
                     f"{worst['formed']['context_tokens']:,} context tokens; "
                     f"the model says {_s(worst['formed']['predicted_s'])})"
                     if worst.get("formed") else worst.get("note", ""))
    lines.append(f"  predicted {_s(worst['predicted_s'])}; {measured_text}")
    lines.extend(advice_lines(out))
    if out.get("moe_kernel"):
        lines.append(f"  {out['moe_kernel']['line']}")
    return "\n".join(lines)


def advice_lines(out: dict[str, Any]) -> list[str]:
    """The answer first (does the deadline in force fire, with what headroom), then what to set:
    each option a complete line to paste."""
    lim, worst, rec = out["limits"], out["worst_step"], out["recommend"]
    stock, room = rec["deadline_in_force_s"], rec["headroom"]
    worst_s = worst["measured_s"] if worst.get("measured_s") is not None else worst["predicted_s"]
    how = "measured" if worst.get("measured_s") is not None else (
        "forecast" if worst.get("forecast") else "predicted")
    needed = worst_s * room
    if worst_s > stock:
        verdict = f"it FIRES: a step that long is declared dead at {stock:g} s"
    elif needed > stock:
        verdict = f"it holds, but without headroom {room:g} ({_s(needed)} wanted)"
    else:
        verdict = f"it holds with headroom {room:g} ({_s(needed)} of {stock:g} s)"
    lines = [f"answer: at --max-num-seqs {lim['max_num_seqs']} --max-num-batched-tokens "
             f"{lim['max_num_batched_tokens']} --max-model-len {lim['max_model_len']} the worst step takes "
             f"{_s(worst_s)} ({how}); the deadline in force is {stock:g} s: {verdict}."]
    if needed <= stock:
        lines.append("what to set: nothing; these limits stay under the deadline in force.")
        return lines
    lines.append("what to set (any one):")
    hours = rec["deadline_s"] / 3600
    lines.append(f"  1. keep the limits, raise the deadline:  {rec['export']}"
                 + (f"  ({hours:.1f} h: a hung engine holds its requests that long; 2. ends a hang in 60 s)"
                    if hours >= 1 else ""))
    lines.append("  2. keep the deadline, run the guard with a cap that covers the worst step x "
                 f"{room:g}:")
    lines.append("       ENGINEDEAD_GUARD=1 ENGINEDEAD_GUARD_POLICY=enginedead_policy:POLICY "
                 "python -m vllm.entrypoints.openai.api_server ...")
    lines.append("     with enginedead_policy.py on the server's PYTHONPATH:")
    lines.append("       from pytest_enginedead import TimeoutPolicy")
    lines.append(f"       {rec['policy']['python']}")
    cap = rec.get("reference_cap_s")
    if cap is not None and not rec.get("reference_cap_covers_worst"):
        lines.append(f"     (the guard's default, the reference policy, caps this step at {_s(cap)}: below "
                     f"the worst step's {_s(worst_s)}, it would end that step as vLLM does)")
    table = rec.get("limits_table") or []
    fits = [row for row in table if row.get("flags")]
    none = [row["max_model_len"] for row in table if not row.get("flags")]
    if fits:
        lines.append("  3. keep the deadline, serve smaller limits (common values whose worst step x "
                     f"{room:g} stays under {stock:g} s):")
        lines.extend(f"       {row['flags']}    (worst step {_s(row['worst_s'])})" for row in fits)
        if none:
            lines.append(f"     (none at --max-model-len {', '.join(map(str, none))})")
    elif none:
        span = f"{none[0]}" if len(none) == 1 else f"{none[0]} to {none[-1]}"
        lines.append(f"  3. smaller limits: no such limits at --max-model-len {span} (1-256 sequences): "
                     "raise the deadline (1) or run the guard (2)")
    return lines
