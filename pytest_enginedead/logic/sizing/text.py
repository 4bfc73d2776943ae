"""The sizing answer as a person reads it: the step model, the table, the worst step, what to set.

One section per function, each reading the typed answer (``answer.SizingAnswer``).  Pure.
"""

from __future__ import annotations

import os

from ..machine import preload_note
from .advice import policy_source
from .answer import SizingAnswer, TableRow, WorstStep
from .fit import LEVEL
from .slices import GIB
from .terms import TERM_UNITS


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 100:
        return f"{seconds:,.0f} s"
    return f"{seconds:.3g} s"


_s = seconds_text


def format_sizing(a: SizingAnswer) -> str:
    """What a person reads: the fit, the table, the worst step, what to set."""
    lines = [*header_lines(a), *forecast_lines(a), *fit_lines(a), *kv_lines(a), *table_lines(a),
             *worst_lines(a), *advice_lines(a)]
    if a.moe_kernel is not None:
        lines.append(f"  {a.moe_kernel.line}")
    return "\n".join(lines)


def header_lines(a: SizingAnswer) -> list[str]:
    name = os.path.basename(a.model.rstrip("/"))
    m = a.machine
    mem = (m.get("memory_bytes") or 0) / GIB
    extra = f" --kv-cache-tokens {a.limits.kv_cache_tokens}" if a.limits.kv_cache_tokens else ""
    if a.tensor_parallel > 1:
        extra += f" --tensor-parallel-size {a.tensor_parallel}"
    return [f"{name} on vLLM {a.vllm}, this machine ({m.get('cores')} cores, {mem:.0f} GiB): "
            f"{a.limits.flags()}{extra}", preload_note(m.get("preloads"))]


def forecast_lines(a: SizingAnswer) -> list[str]:
    """A forecast's per-layer costs and the floors its context terms were held to."""
    if not a.is_forecast or a.joint is None:
        return []
    c = a.joint.coefficients
    lines = [f"forecast to {a.layout.depth} layers from depth slices: depth-independent "
             f"{c['fixed']:.4g} s + {c['per_seq']:.4g} s/seq + {c['per_token']:.4g} s/token; per layer:"]
    for kind, t in a.joint.per_layer().items():
        experts = f"{t.per_expert_s:.4g} s/expert reached + " if a.fit.routing is not None else ""
        lines.append(f"  {kind:<24} {t.fixed_s:.4g} s + {t.per_token_s:.4g} s/token + {experts}"
                     f"{t.per_context_token_s:.4g} s/key attended + {t.per_read_token_s:.4g} s/key read")
    if a.joint.tied:
        lines.append("  (the layer types' context terms are tied by their attention work per key: "
                     "the measured steps could not tell them apart; the interval holds both readings)")
    held = [f"{k} per key attended >= {ctx:.3g} s, read >= {read:.3g} s"
            for k, (ctx, read) in a.joint.floors_at().items() if ctx or read]
    if held:
        lines.append("  floors from the model's shape at this machine's measured rates: " + "; ".join(held))
    return lines


def fit_lines(a: SizingAnswer) -> list[str]:
    """The step model: where it came from, how well it fits, each term and its standard deviation."""
    fit = a.fit
    at = fit.worst
    where = ""
    if at is not None:
        where = f" at {at.step.seqs} seqs, {at.step.tokens} tokens, {at.step.context_tokens} context tokens"
        where += f" on {at.measured_on}" if at.measured_on else ""
    lines = [f"step model ({fit.origin}, {fit.steps} steps in {fit.groups} groups; worst residual "
             f"{fit.worst_residual * 100:.0f} %{where}):"]
    sd = fit.uncertainty.term_sd() if fit.uncertainty is not None else {}
    for term, value in fit.terms.items():
        spread = f" +- {sd[term]:.2g}" if sd.get(term) else ""
        lines.append(f"  {term:<25} {value:10.4g}{spread:<11}  {TERM_UNITS.get(term, '')}")
    if fit.routing is not None:
        lines.append(f"  experts reached per layer: {fit.routing.describe()}; 1 token reaches "
                     f"{fit.routing.touched(1):.0f}, 8 reach {fit.routing.touched(8):.1f}, 2048 reach "
                     f"{fit.routing.touched(2048):.0f}")
    lines.append("  keys read: one cost per KV byte in every layer type (the window's reads cannot be told "
                 "from the sequences' own)" if a.layout.has_sliding else "")
    seen = [f"{name} {span.shortest:,}-{span.longest:,} keys (x{span.factor:.0f})"
            for name, span in (("decode", a.contexts.decode), ("prefill", a.contexts.prefill))
            if span.factor and span.shortest is not None and span.longest is not None]
    if seen:
        lines.append("  contexts measured: " + ", ".join(seen))
    return [ln for ln in lines if ln]


def kv_lines(a: SizingAnswer) -> list[str]:
    kv, lim = a.kv, a.limits
    if kv is None:
        return []
    requests = kv.requests(lim.max_model_len, lim.max_num_batched_tokens)
    tokens = kv.tokens(lim.max_model_len, lim.max_num_batched_tokens)
    return [f"KV cache: {kv.bytes / GIB:.1f} GiB ({kv.source}): {requests:.1f} requests of "
            f"{lim.max_model_len:,} tokens (vLLM would log 'KV cache size: {tokens:,} tokens')"]


def table_lines(a: SizingAnswer) -> list[str]:
    head = f"stock {a.deadline_s:g} s"
    level = f"{LEVEL * 100:.0f} % interval"
    lines = [f"{'batch':>5}  {'context':>7}  {'measured p50':>12}  {'model':>9}  {level:>17}  {head:>12}"]
    return lines + [_row_line(r) for r in a.rows]


def _row_line(r: TableRow) -> str:
    measured = _s(r.measured.p50_s) if r.measured else ("forecast" if r.forecast else "-")
    fires = "FIRES" if r.stock_fires else "ok"
    if r.fits_kv_cache is False:
        fires = "no room"  # the cache cannot hold that many sequences at that context
    band = f"{_s(r.interval_s[0])}-{_s(r.interval_s[1])}" if r.interval_s else ""
    return (f"{r.batch_size:>5}  {r.context_tokens:>7}  {measured:>12}  {_s(r.predicted_s):>9}  {band:>17}  "
            f"{fires:>12}")


def worst_lines(a: SizingAnswer) -> list[str]:
    w = a.worst
    lines = [f"worst step the scheduler can form: {w.plan.describe()} ({w.step.seqs} seqs, "
             f"{w.step.tokens} tokens, {w.step.context_tokens:,} context tokens)"]
    if w.binding:
        names = {"kv_cache": "the KV cache"}
        cache = ""
        if w.kv_cache_held_bytes is not None and w.kv_cache_bytes:
            cache = (f" (it holds {w.kv_cache_held_bytes / GIB:.2f} of the cache's "
                     f"{w.kv_cache_bytes / GIB:.2f} GiB)")
        lines.append("  limits that bind: " + ", ".join(names.get(b, b) for b in w.binding) + cache)
    low, high = w.interval_s
    lines.append(f"  predicted {_s(w.predicted_s)} ({LEVEL * 100:.0f} % interval {_s(low)}-{_s(high)}; "
                 f"the advice is taken from {_s(high)}); {_measured_text(w)}")
    if a.repeats is not None:
        lines.append("  each round alone: " + ", ".join(_s(v) for v in a.repeats.worst_predicted_s)
                     + f" (spread {a.repeats.spread * 100:.0f} %)")
    return lines


def _measured_text(w: WorstStep) -> str:
    f = w.formed
    if f is None:
        return w.note or ""
    return (f"measured {_s(f.measured_s)} (formed: {f.step.seqs} seqs, {f.step.tokens} tokens, "
            f"{f.step.context_tokens:,} context tokens; the model says {_s(f.predicted_s)})")


def answer_line(a: SizingAnswer) -> str:
    """The answer in one line: the worst step at these limits, the deadline in force, and whether it holds."""
    w, stock, room = a.worst, a.deadline_s, a.headroom
    worst_s = w.measured_s if w.measured_s is not None else w.upper_s
    how = "measured" if w.measured_s is not None else (
        ("forecast" if w.forecast else "predicted") + ", the interval's upper end")
    needed = worst_s * room
    if worst_s > stock:
        verdict = f"it FIRES: a step that long is declared dead at {stock:g} s"
    elif needed > stock:
        verdict = f"it holds, but without headroom {room:g} ({_s(needed)} wanted)"
    else:
        verdict = f"it holds with headroom {room:g} ({_s(needed)} of {stock:g} s)"
    return (f"answer: at {a.limits.flags()} the worst step takes {_s(worst_s)} ({how}); the deadline in "
            f"force is {stock:g} s: {verdict}.")


def _worst_s(a: SizingAnswer) -> float:
    return a.worst.measured_s if a.worst.measured_s is not None else a.worst.upper_s


def advice_lines(a: SizingAnswer) -> list[str]:
    """The answer first (does the deadline in force fire, with what headroom), then what to set: each
    option a complete line to paste."""
    lines = [answer_line(a)]
    if _worst_s(a) * a.headroom <= a.deadline_s:
        lines.append("what to set: nothing; these limits stay under the deadline in force.")
        return lines
    return [*lines, "what to set (any one):", *deadline_lines(a), *guard_lines(a), *limits_lines(a)]


def deadline_lines(a: SizingAnswer) -> list[str]:
    rec = a.advice
    hours = rec.recommended_s / 3600
    line = ("  1. keep the limits, raise the deadline:  "
            f"export VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={rec.recommended_s}")
    if hours >= 1:
        line += f"  ({hours:.1f} h: a hung engine holds its requests that long; 2. ends a hang in 60 s)"
    return [line]


def guard_lines(a: SizingAnswer) -> list[str]:
    rec = a.advice
    lines = [f"  2. keep the deadline, run the guard with a cap that covers the worst step x {a.headroom:g}:",
             "       ENGINEDEAD_GUARD=1 ENGINEDEAD_GUARD_POLICY=enginedead_policy:POLICY "
             "python -m vllm.entrypoints.openai.api_server ...",
             "     with enginedead_policy.py on the server's PYTHONPATH:",
             "       from pytest_enginedead import TimeoutPolicy",
             f"       {policy_source(rec.policy)}"]
    cap, worst_s = rec.reference_cap_s, _worst_s(a)
    if cap is not None and cap < rec.worst_s:
        lines.append(f"     (the guard's default, the reference policy, caps this step at {_s(cap)}: below "
                     f"the worst step's {_s(worst_s)}, it would end that step as vLLM does)")
    return lines


def limits_lines(a: SizingAnswer) -> list[str]:
    table = a.advice.table
    fits = [row for row in table if row.flags()]
    none = [row.max_model_len for row in table if not row.flags()]
    stock, room = a.deadline_s, a.headroom
    if fits:
        lines = [f"  3. keep the deadline, serve smaller limits (common values whose worst step x {room:g} "
                 f"stays under {stock:g} s):"]
        lines += [f"       {row.flags()}    (worst step {_s(row.worst_s)})" for row in fits]
        if none:
            lines.append(f"     (none at --max-model-len {', '.join(map(str, none))})")
        return lines
    if none:
        span = f"{none[0]}" if len(none) == 1 else f"{none[0]} to {none[-1]}"
        return [f"  3. smaller limits: no such limits at --max-model-len {span} (1-256 sequences): "
                "raise the deadline (1) or run the guard (2)"]
    return []
