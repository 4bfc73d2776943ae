"""From what the engines recorded to the answer: the fit, the worst step, the table, the advice.

``Measured`` is what one engine (the model or a depth slice) recorded, run by run;
``sizing_answer`` turns the engines' records into a typed ``answer.SizingAnswer``.  Pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...contract.steps import StepTime, one_per_step
from ..machine import this_machine
from ..timeouts.policies import STOCK_DEADLINE_S
from . import advice, shapes
from .answer import (
    ContextsSeen,
    DecodeTimes,
    EngineRecord,
    Formed,
    Repeats,
    RoundAnswer,
    SizingAnswer,
    Span,
    TableRow,
    WorstStep,
)
from .fit import Fit
from .forecast import Forecast, fit_slices
from .kvcache import cache_of
from .plan import EnginePlan, SizingPlan
from .terms import Step

#: the run name of the worst step formed on the engine (not fitted)
WORST = "worst step"
#: what the names of runs kept out of the fit begin with (measured to check the fit against)
HELD_OUT = "held out: "
#: keys per token below which a step measures the batch terms, not attention (one-token prompts)
SHORT_CONTEXT = 64
#: batch sizes the table answers for, beside those measured (the report's question)
REPORT_BATCHES = (8, 64, 128)


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


def duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class Measured:
    """What one engine recorded: steps per run, and its start time."""

    plan: EnginePlan
    runs: dict[str, list[StepTime]]
    start_s: float | None = None
    worst_formed: tuple[Step, float] | None = None
    worst_note: str | None = None
    #: rounds of the same runs on this engine (``--repeat``): round r's runs are named "NAME #r+1"
    rounds: int = 1


def to_step(s: StepTime) -> Step | None:
    if s.seconds is None or s.tokens is None or s.context_tokens is None:
        return None
    return Step(s.batch_size, s.tokens, s.context_tokens, s.window_context_tokens, s.read_tokens,
                s.window_read_tokens)


def samples_of(steps: Iterable[StepTime]) -> list[tuple[Step, float]]:
    """Each finished step once (``one_per_step``: a tensor-parallel engine's ranks each record it),
    as its shape and seconds."""
    out = []
    for s in one_per_step(steps):
        step = to_step(s)
        if step is not None and s.seconds is not None:
            out.append((step, s.seconds))
    return out


def round_of(name: str) -> int:
    """The round a run's steps belong to (0: the first; "NAME #3": 2)."""
    head, sep, tail = name.rpartition(" #")
    return int(tail) - 1 if sep and head and tail.isdigit() else 0


def fitted_runs(m: Measured, only: int | None = None) -> list[tuple[Step, float]]:
    """The steps of an engine's runs the fit is made of (of round ``only``, else of all): not the worst step
    formed, not the runs held out."""
    return samples_of(s for name, steps in m.runs.items()
                      if fitted_name(name) and (only is None or round_of(name) == only) for s in steps)


def fitted_name(name: str) -> bool:
    """Whether a run of this name is fitted: not the worst step formed, not a run held out."""
    return name != WORST and not name.startswith(HELD_OUT)


def fit_of(plan: SizingPlan, measured: Sequence[Measured], only: int | None = None) -> Forecast:
    """The fit over every engine's steps (of round ``only``, else of all rounds)."""
    parts = [(m.plan.layout, fitted_runs(m, only)) for m in measured]
    origin = None if plan.forecast else "measured"
    return fit_slices(parts, plan.layout, plan.config, origin)


def _advise(plan: SizingPlan, fitted: Fit, headroom: float, deadline_s: float) -> advice.Advice:
    return advice.advise(fitted, plan.limits, plan.window, headroom, deadline_s,
                         shapes.model_max_len(plan.config), plan.kv)


def worst_of(plan: SizingPlan, adv: advice.Advice, fitted: Fit, main: Measured | None = None) -> WorstStep:
    """The worst step: its shape, the forecast and its interval, what binds, and how it was measured."""
    step = adv.worst.step(plan.window)
    predicted = adv.worst_predicted_s if adv.worst_predicted_s is not None else adv.worst_s
    pool = cache_of(plan.limits, plan.kv)
    formed, note = _formed(plan, fitted, main)
    interval = adv.worst_interval_s or (predicted, predicted)
    held, total = (None, None) if pool is None else (pool.held(adv.worst), pool.bytes)
    return WorstStep(adv.worst, step, predicted, interval, plan.forecast, adv.binding, held, total, formed,
                     note)


def _formed(plan: SizingPlan, fitted: Fit, main: Measured | None) -> tuple[Formed | None, str | None]:
    if plan.forecast:
        return None, "a forecast: the full-depth model was not run"
    if plan.validate_note:
        return None, plan.validate_note
    if main is not None and main.worst_formed is not None:
        shape, seconds = main.worst_formed
        return Formed(shape, seconds, fitted.predict(shape)), None
    if plan.validate:
        return None, None if main is None else main.worst_note
    return None, "not formed (--no-validate)"


def sizing_answer(plan: SizingPlan, measured: Sequence[Measured], headroom: float, deadline_s: float,
                  vllm_version: str | None = None) -> SizingAnswer:
    """What the engines' records answer (pure, given what was measured)."""
    fc = fit_of(plan, measured)
    adv = _advise(plan, fc.fit, headroom, deadline_s)
    rounds = max(m.rounds for m in measured)
    return SizingAnswer(
        model=plan.model, vllm=vllm_version, machine=this_machine(), limits=plan.limits, layout=plan.layout,
        headroom=headroom, fit=fc.fit, worst=worst_of(plan, adv, fc.fit, measured[-1]), advice=adv,
        joint=fc, is_forecast=plan.forecast,
        rows=tuple(measured_rows(plan, measured[-1], fc.fit, headroom) + model_rows(plan, fc.fit, headroom)),
        engines=tuple(_record(m) for m in measured), contexts=contexts_seen(measured),
        tensor_parallel=plan.tensor_parallel, kv=plan.kv,
        repeats=repeats(plan, measured, rounds, headroom, deadline_s) if rounds > 1 else None,
    )


def _record(m: Measured) -> EngineRecord:
    return EngineRecord(m.plan.label, m.plan.depth, m.start_s, m.plan.memory.total, m.plan.kv_cache_gib,
                        {name: samples_of(steps) for name, steps in m.runs.items()})


def contexts_seen(measured: Sequence[Measured]) -> ContextsSeen:
    """The spread of contexts the fit saw: keys per decode and per prefill token (steps at more than
    ``SHORT_CONTEXT`` keys a token)."""
    decode, chunk = set(), set()
    for m in measured:
        for name, steps in m.runs.items():
            for step, _ in samples_of(steps) if fitted_name(name) else []:
                if step.tokens == step.seqs and step.seqs:
                    decode.add(round(step.context_tokens / step.seqs))
                elif step.tokens > step.seqs:  # a chunk's tokens (beside decodes, which add little)
                    chunk.add(round(step.context_tokens / (step.tokens - step.seqs + 1)))

    def span(found: set[int]) -> Span:
        long = [c for c in found if c > SHORT_CONTEXT]
        return Span(min(long, default=None), max(long, default=None))

    return ContextsSeen(span(decode), span(chunk))


def repeats(plan: SizingPlan, measured: Sequence[Measured], rounds: int, headroom: float,
            deadline_s: float) -> Repeats:
    """Each round fitted alone (``--repeat``): its worst step."""
    each = []
    for r in range(rounds):
        fitted = fit_of(plan, measured, r).fit
        adv = _advise(plan, fitted, headroom, deadline_s)
        w = worst_of(plan, adv, fitted)
        each.append(RoundAnswer(r + 1, w.predicted_s, w.interval_s, w.plan, fitted))
    return Repeats(tuple(each))


def _recommended(headroom: float, seconds: float) -> float:
    return float(max(STOCK_DEADLINE_S, math.ceil(headroom * seconds)))


def measured_rows(plan: SizingPlan, main: Measured, fitted: Fit, headroom: float) -> list[TableRow]:
    """The decode batches measured on the model itself (none for a forecast), slowest step judged."""
    rows: list[TableRow] = []
    for n in [] if plan.forecast else plan.batch_sizes:
        steps = [s for s in main.runs.get(f"decode batch {n}", [])
                 if s.seconds is not None and s.batch_size == n and s.tokens == n]
        times = [s.seconds for s in steps if s.seconds is not None]
        shape = to_step(steps[len(steps) // 2]) if steps else None
        if not times or shape is None:
            continue
        times_of = DecodeTimes(len(times), statistics.median(times), quantile(times, 0.99), max(times))
        rows.append(TableRow(n, round(shape.context_tokens / n), fitted.predict(shape), max(times),
                             _recommended(headroom, max(times)), False, times_of))
    return rows


def model_rows(plan: SizingPlan, fitted: Fit, headroom: float) -> list[TableRow]:
    """Decodes at 1K and the longest context, per report batch, as the model predicts them (the
    interval's upper end judged)."""
    top = max(1, plan.limits.max_model_len - 1)
    batches = sorted({n for n in (*REPORT_BATCHES, *plan.batch_sizes, plan.limits.max_num_seqs)
                      if n <= plan.limits.max_num_seqs})
    pool = cache_of(plan.limits, plan.kv)
    rows = []
    for ctx in sorted({min(1024, top), top}):
        for n in batches:
            decodes = shapes.StepPlan(n, ctx)
            step = decodes.step(plan.window)
            low, high = fitted.interval(step)
            rows.append(TableRow(n, ctx, fitted.predict(step), high, _recommended(headroom, high),
                                 plan.forecast, interval_s=(low, high),
                                 fits_kv_cache=pool is None or pool.held(decodes) <= pool.bytes))
    return rows
