"""How far forecasts were from steps they never saw: the validation set and its figures.

``held_out_runs`` are the steps measured on the full model and kept out of every fit:
decode batches the fit did not measure (2 to 128 at short context), prompts whole and a full
chunk, the fit's long prompt (8K) taken on to 16K (chunks at contexts the fit never saw),
decodes at long context (2K to 16K keys), and steps of
the shape of the scheduler's worst (all but one sequence decoding beside one prefill
chunk), at short and long context.  Each group of like steps (its median time) is one
``Check`` against a fit: the forecast from depth slices, or the model's own fit on its
fit runs.  ``summary`` gives what a capacity planner reads: MAPE, the mean signed error
(negative: the forecast was short, the dangerous side), the worst error, and how often the
measured step fell inside the forecast's interval (its coverage, against the stated level).

Pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .fit import LEVEL, Fit, mean_shape
from .runs import Run, Wave, decode_name
from .terms import Step

#: decode batches held out at short context (the fit measures ``runs.DECODE_BATCHES``: 1, 2, 8, 32)
HELD_OUT_BATCHES = (4, 16, 64, 128)
#: the kinds of step a check is of
KINDS = ("decode", "prefill", "long decode", "long prefill", "worst")


def held_out_runs(max_num_seqs: int, budget: int, longest: int, steps: int) -> list[Run]:
    """The runs of the validation set, for an engine whose long prompt (shared by the runs at long
    context, found in its prefix cache) is ``longest`` tokens."""
    out = [Run(decode_name(n), (Wave((1,) * n, steps + 1),)) for n in HELD_OUT_BATCHES
           if n <= max_num_seqs]
    out += [Run("4 prompts of 256 tokens", (Wave((256,) * 4, 1),)),
            Run(f"a prompt of {budget} tokens", (Wave((budget,), 1),))]
    out += _long_runs(max_num_seqs, budget, longest, steps)
    seqs = min(32, max_num_seqs)  # the worst step at short context: all but one decoding beside a chunk
    out.append(Run(f"{seqs - 1} decodes at 385 tokens beside a 256-token chunk after 256",
                   (Wave((384 + 1,) * (seqs - 1), steps + 4, shared=384), Wave((256 + 256,), 1, shared=256))))
    return out


def _long_runs(max_num_seqs: int, budget: int, longest: int, steps: int) -> list[Run]:
    rungs = sorted({c for c in (longest // 8, longest // 2, longest) if c >= 256})
    # the fit's long prompt (``runs.LONG_CONTEXT``, its start) taken on to ``longest``: its chunks past
    # the fit's are held out, and every run after it finds it in the prefix cache
    runs = [Run(f"the long prompt on to {longest} tokens", (Wave((longest,), 1, shared=longest),), long=True)]
    for c, n in zip(rungs, (4, 16, 16), strict=False):
        n = min(n, max_num_seqs)
        runs.append(Run(f"{n} decodes at {c} tokens of context", (Wave((c + 1,) * n, steps + 1, shared=c),),
                        long=True))
    seqs = min(16, max_num_seqs)  # the worst step at long context
    after = (longest - 512) // 128 * 128
    runs.append(Run(f"{seqs - 1} decodes at {longest} tokens beside a 512-token chunk after {after}",
                    (Wave((longest + 1,) * (seqs - 1), steps + 4, shared=longest),
                     Wave((after + 512,), 1, shared=after)), long=True))
    return runs


def kind_of(step: Step, long: int = 1024) -> str:
    """What kind of step this is: decodes alone or a prefill, at short or long context (keys per token
    over ``long``), or eight and more sequences beside a prefill chunk (the worst step's shape).  The
    held-out runs' prompts that go on past a cached prefix go on by one token: their first step is a
    decode at that context, and counted so."""
    decodes_only = step.tokens == step.seqs
    keys = step.context_tokens / max(1, step.tokens)
    if not decodes_only and step.seqs > 2 and step.tokens > step.seqs + 16:
        return "worst" if step.seqs >= 8 else ("long prefill" if keys > long else "prefill")
    if decodes_only:
        return "long decode" if keys > long else "decode"
    return "long prefill" if keys > long else "prefill"


@dataclass(frozen=True)
class Check:
    """One group of held-out steps against one fit's forecast."""

    kind: str
    step: Step
    steps: int
    measured_s: float
    predicted_s: float
    interval_s: tuple[float, float]

    @property
    def error(self) -> float:
        """(forecast - measured) / measured: negative when the forecast was short."""
        return (self.predicted_s - self.measured_s) / self.measured_s

    @property
    def inside(self) -> bool:
        return self.interval_s[0] <= self.measured_s <= self.interval_s[1]


#: keys per token under which a step's context is short (it measures the batch, not attention), and the
#: relative width of the context buckets over it: like steps of one run are pooled into one check
SHORT_KEYS, CONTEXT_BUCKET = 64, 0.25


def pooled(samples: Iterable[tuple[Step, float]]) -> list[tuple[Step, float, int]]:
    """Like steps pooled into one check each: the same sequences and tokens, keys per token within
    ``CONTEXT_BUCKET`` (or all short); each group's mean shape and median time.  A decode batch's steps
    at contexts 3, 5, 7, 9 are one check, not four single steps, each as noisy as one step is."""
    groups: dict[tuple[int, int, int], list[tuple[Step, float]]] = {}
    for step, seconds in samples:
        keys = step.context_tokens / max(1, step.tokens)
        bucket = 0 if keys < SHORT_KEYS else 1 + int(math.log(keys) / math.log1p(CONTEXT_BUCKET))
        groups.setdefault((step.seqs, step.tokens, bucket), []).append((step, seconds))
    out = []
    for members in groups.values():
        seconds = statistics.median(t for _, t in members)
        out.append((mean_shape([s for s, _ in members]), seconds, len(members)))
    return sorted(out, key=lambda g: (g[0].seqs, g[0].tokens, g[0].context_tokens))


def designed(step: Step, steps: int) -> bool:
    """Whether a group is a step the run was made to form: two or more like decodes, or a step with a
    prefill chunk (one each by design: a long prompt's chunks, the worst step).  A lone decode step is a
    transition, its batch's requests still arriving: one step, of a shape the run did not ask for, and
    the first of a request pays its admission (on the tiny Llama a 1-sequence first step took 10 ms
    against 6 ms for the same shape decoding)."""
    return steps >= 2 or step.tokens > step.seqs


def checks(fit: Fit, runs: Iterable[Sequence[tuple[Step, float]]]) -> list[Check]:
    """Each group of like held-out steps of a run (its median time) that the run was made to form
    (``designed``), against ``fit``'s forecast and interval."""
    return [Check(kind_of(step), step, n, seconds, fit.predict(step), fit.interval(step))
            for samples in runs for step, seconds, n in pooled(samples) if designed(step, n)]


@dataclass(frozen=True)
class Summary:
    """A set of checks in the figures a capacity planner reads."""

    checks: int
    mape: float
    mean_signed: float
    #: the error of largest size, with its sign
    worst: float
    #: the most negative error (0 when no forecast was short)
    most_short: float
    #: the share of measured steps inside the forecast's interval, and the level the interval states
    coverage: float
    level: float = LEVEL


def summary(found: Sequence[Check]) -> Summary:
    if not found:
        return Summary(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    errors = [c.error for c in found]
    return Summary(len(found), statistics.fmean(abs(e) for e in errors), statistics.fmean(errors),
                   max(errors, key=abs), min(0.0, *errors), sum(c.inside for c in found) / len(found))
