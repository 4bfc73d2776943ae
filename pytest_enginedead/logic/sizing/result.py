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
from .kvcache import cache_of
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
    #: rounds of the same runs on this engine (``--repeat``): round r's runs are named "NAME #r+1"
    rounds: int = 1


def to_step(s: StepTime) -> fit_.Step | None:
    if s.seconds is None or s.tokens is None or s.context_tokens is None:
        return None
    return fit_.Step(s.batch_size, s.tokens, s.context_tokens, s.window_context_tokens, s.read_tokens,
                     s.window_read_tokens)


def samples_of(steps: Iterable[StepTime]) -> list[tuple[fit_.Step, float]]:
    out = []
    for s in steps:
        step = to_step(s)
        if step is not None and s.seconds is not None:
            out.append((step, s.seconds))
    return out


def round_of(name: str) -> int:
    """The round a run's steps belong to (0: the first; "NAME #3": 2)."""
    head, sep, tail = name.rpartition(" #")
    return int(tail) - 1 if sep and head and tail.isdigit() else 0


def fit_of(plan: SizingPlan, measured: Sequence[Measured], only: int | None = None) -> Forecast:
    """The fit over every engine's steps (of round ``only``, else of all rounds)."""
    parts = [(m.plan.layout, samples_of(s for name, steps in m.runs.items()
                                        if name != WORST and (only is None or round_of(name) == only)
                                        for s in steps))
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
                        shapes.model_max_len(plan.config), plan.kv)
    worst = worst_of(plan, adv)
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
                     "steps": sum(len(v) for v in m.runs.values()),
                     "recorded": {name: [[*s.as_dict().values(), t] for s, t in samples_of(steps)]
                                  for name, steps in m.runs.items()}} for m in measured],
    }
    if plan.forecast:
        out["forecast"] = fc.as_dict(plan.layout)
    if plan.kv is not None:
        out["kv_cache"] = plan.kv.as_dict(plan.limits.max_model_len, plan.limits.max_num_batched_tokens)
    out["contexts_measured"] = _contexts(measured)
    rounds = max(m.rounds for m in measured)
    if rounds > 1:
        out["repeats"] = repeats(plan, measured, rounds, headroom, deadline_s)
    return out


def worst_of(plan: SizingPlan, adv: advice.Advice) -> dict[str, Any]:
    """The worst step as the JSON carries it: its shape, the forecast and its interval, what binds."""
    step = adv.worst.step(plan.window)
    predicted = adv.worst_predicted_s if adv.worst_predicted_s is not None else adv.worst_s
    low, high = adv.worst_interval_s or (predicted, predicted)
    pool = cache_of(plan.limits, plan.kv)
    return {
        **step.as_dict(), "plan": adv.worst.as_dict(), "predicted_s": predicted, "interval_s": [low, high],
        "upper_s": high, "measured_s": None, "stock_fires": high > STOCK_DEADLINE_S,
        "forecast": plan.forecast,
        "binding": list(adv.binding),
        "kv_cache_held_bytes": None if pool is None else pool.held(adv.worst),
        "kv_cache_bytes": None if pool is None else pool.bytes,
    }


#: keys per token below which a step measures the batch terms, not attention (one-token prompts)
SHORT_CONTEXT = 64


def _contexts(measured: Sequence[Measured]) -> dict[str, Any]:
    """The spread of contexts the fit saw: keys per decode and per prefill token (steps at more than
    ``SHORT_CONTEXT`` keys a token), longest over shortest."""
    decode, chunk = set(), set()
    for m in measured:
        for name, steps in m.runs.items():
            for s in samples_of(steps) if name != WORST else []:
                step = s[0]
                if step.tokens == step.seqs and step.seqs:
                    decode.add(round(step.context_tokens / step.seqs))
                elif step.tokens > step.seqs:  # a chunk's tokens (beside decodes, which add little)
                    chunk.add(round(step.context_tokens / (step.tokens - step.seqs + 1)))
    out: dict[str, Any] = {}
    for name, found in (("decode", decode), ("prefill", chunk)):
        long = [c for c in found if c > SHORT_CONTEXT]
        out[name] = {"shortest": min(long, default=None), "longest": max(long, default=None),
                     "factor": max(long) / min(long) if long else None}
    return out


def repeats(plan: SizingPlan, measured: Sequence[Measured], rounds: int, headroom: float,
            deadline_s: float) -> dict[str, Any]:
    """Each round fitted alone (``--repeat``): its worst step, and how far the rounds are apart."""
    each = []
    for r in range(rounds):
        fitted = fit_of(plan, measured, r).fit
        adv = advice.advise(fitted, plan.limits, plan.window, headroom, deadline_s,
                            shapes.model_max_len(plan.config), plan.kv)
        w = worst_of(plan, adv)
        each.append({"round": r + 1, "predicted_s": w["predicted_s"], "interval_s": w["interval_s"],
                     "plan": w["plan"]["described"], "terms": fitted.as_dict()["terms"]})
    values = [e["predicted_s"] for e in each]
    mean = sum(values) / len(values)
    return {"rounds": each, "worst_predicted_s": values,
            "spread": (max(values) - min(values)) / mean if mean > 0 else 0.0}


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
    pool = cache_of(plan.limits, plan.kv)
    for ctx in contexts:
        for n in batches:
            decodes = shapes.StepPlan(n, ctx)
            decode = decodes.step(plan.window)
            seconds = fitted.predict(decode)
            low, high = fitted.interval(decode)
            rows.append(judge({
                "batch_size": n, "context_tokens": ctx, "steps": 0, "p50_s": seconds, "p99_s": seconds,
                "max_s": seconds, "predicted_s": seconds, "interval_s": [low, high], "measured": False,
                "forecast": plan.forecast, "fits_kv_cache": pool is None or pool.held(decodes) <= pool.bytes,
            }, high))
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
                         f"{t['per_context_token_s']:.4g} s/key attended + "
                         f"{t.get('per_read_token_s', 0.0):.4g} s/key read")
        if f["context_terms_tied"]:
            lines.append("  (the layer types' context terms are tied by their attention work per key: "
                         "the measured contexts could not tell them apart)")
        held = [f"{k} per key attended >= {v['per_context_token_s']:.3g} s, "
                f"read >= {v['per_read_token_s']:.3g} s"
                for k, v in (f.get("floors") or {}).items()
                if v["per_context_token_s"] or v["per_read_token_s"]]
        if held:
            lines.append("  floors from the model's shape at this machine's measured rates: "
                         + "; ".join(held))
    worst_at = fit.get("worst_residual_step") or {}
    lines.append(f"step model ({fit['origin']}, {fit['steps']} steps in {fit['groups']} groups; worst "
                 f"residual {fit['worst_residual'] * 100:.0f} % at {worst_at.get('seqs')} seqs, "
                 f"{worst_at.get('tokens')} tokens, {worst_at.get('context_tokens')} context tokens"
                 + (f" on {worst_at['measured_on']}" if worst_at.get("measured_on") else "") + "):")
    sd = ((fit.get("uncertainty") or {}).get("terms_sd") or {})
    for term, value in fit["terms"].items():
        key = term.removesuffix("_s")
        spread = f" +- {sd[term]:.2g}" if sd.get(term) else ""
        lines.append(f"  {key:<25} {value:10.4g}{spread:<11}  {fit_.TERM_UNITS.get(key, '')}")
    ctx = out.get("contexts_measured") or {}
    seen = [f"{k} {v['shortest']:,}-{v['longest']:,} keys (x{v['factor']:.0f})" for k, v in ctx.items()
            if v.get("factor")]
    if seen:
        lines.append("  contexts measured: " + ", ".join(seen))
    if out.get("kv_cache"):
        kv = out["kv_cache"]
        lines.append(f"KV cache: {kv['gib']:.1f} GiB ({kv['source']}): {kv['requests_at_max_model_len']:.1f} "
                     f"requests of {lim['max_model_len']:,} tokens (vLLM would log 'KV cache size: "
                     f"{kv['tokens']:,} tokens')")
    head = f"stock {stock:g} s"
    lines.append(f"{'batch':>5}  {'context':>7}  {'measured p50':>12}  {'model':>9}  {'interval':>17}  "
                 f"{head:>12}")
    for r in out["results"]:
        measured = _s(r["p50_s"]) if r["measured"] else ("forecast" if r["forecast"] else "-")
        fires = "FIRES" if r["stock_fires"] else "ok"
        if r.get("fits_kv_cache") is False:
            fires = "no room"  # the cache cannot hold that many sequences at that context
        low, high = r.get("interval_s") or (None, None)
        band = f"{_s(low)}-{_s(high)}" if low is not None else ""
        lines.append(f"{r['batch_size']:>5}  {r['context_tokens']:>7}  {measured:>12}  "
                     f"{_s(r['predicted_s']):>9}  {band:>17}  {fires:>12}")
    lines.append(f"worst step the scheduler can form: {shapes.StepPlan.from_dict(worst['plan']).describe()} "
                 f"({worst['seqs']} seqs, {worst['tokens']} tokens, "
                 f"{worst['context_tokens']:,} context tokens)")
    if worst.get("binding"):
        names = {"kv_cache": "the KV cache"}
        held = worst.get("kv_cache_held_bytes")
        total = worst.get("kv_cache_bytes")
        cache = (f" (it holds {held / slices.GIB:.2f} of the cache's {total / slices.GIB:.2f} GiB)"
                 if held is not None and total else "")
        lines.append("  limits that bind: " + ", ".join(names.get(b, b) for b in worst["binding"]) + cache)
    measured_text = (f"measured {_s(worst['measured_s'])} (formed: {worst['formed']['seqs']} seqs, "
                     f"{worst['formed']['tokens']} tokens, "
                     f"{worst['formed']['context_tokens']:,} context tokens; "
                     f"the model says {_s(worst['formed']['predicted_s'])})"
                     if worst.get("formed") else worst.get("note", ""))
    low, high = worst.get("interval_s") or (worst["predicted_s"], worst["predicted_s"])
    lines.append(f"  predicted {_s(worst['predicted_s'])} (interval {_s(low)}-{_s(high)}; the advice is "
                 f"taken from {_s(high)}); {measured_text}")
    if out.get("repeats"):
        rep = out["repeats"]
        lines.append("  each round alone: " + ", ".join(_s(v) for v in rep["worst_predicted_s"])
                     + f" (spread {rep['spread'] * 100:.0f} %)")
    lines.extend(advice_lines(out))
    if out.get("moe_kernel"):
        lines.append(f"  {out['moe_kernel']['line']}")
    return "\n".join(lines)


def advice_lines(out: dict[str, Any]) -> list[str]:
    """The answer first (does the deadline in force fire, with what headroom), then what to set:
    each option a complete line to paste."""
    lim, worst, rec = out["limits"], out["worst_step"], out["recommend"]
    stock, room = rec["deadline_in_force_s"], rec["headroom"]
    upper = worst.get("upper_s", worst["predicted_s"])
    worst_s = worst["measured_s"] if worst.get("measured_s") is not None else upper
    how = "measured" if worst.get("measured_s") is not None else (
        ("forecast" if worst.get("forecast") else "predicted") + ", the interval's upper end")
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
