"""What an engine counts for Prometheus, as values: the step histogram by phase, the guard's
decisions by action and verdict, the steps it saved, the deaths by verdict (``Totals``).

The engine core keeps them in its mapped record (``metricsfile``); when it is gone, the next
engine core of the same server folds them into the server's carried totals (a small JSON file
beside the records), so a counter keeps counting across a restart and the death that caused the
restart is still counted after it.  Everything here is the standard library only.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .decisions import Decision, GuardAction, Verdict

#: The step histogram's upper bounds, in seconds: a decode step on a GPU (milliseconds) to a
#: prefill chunk at long context on a small CPU (hours); the last bucket is +Inf.
STEP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                  300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)

#: buckets with +Inf
BUCKETS = len(STEP_BUCKETS_S) + 1


class StepPhase(enum.IntEnum):
    """The two RPCs of one engine step that vLLM's deadline bounds."""

    FORWARD = 0  # execute_model: the forward pass
    SAMPLING = 1  # sample_tokens: sampling the next tokens

    @property
    def label(self) -> str:
        """The value of the ``phase`` label."""
        return "forward" if self is StepPhase.FORWARD else "sampling"

    @classmethod
    def of_method(cls, method: str) -> StepPhase:
        """The phase of a step RPC by its name (``execute_model`` / ``sample_tokens``)."""
        return cls.SAMPLING if method == "sample_tokens" else cls.FORWARD


#: every kind of decision (action, verdict), in the order the record keeps them
DECISION_KEYS: tuple[Decision, ...] = tuple(
    Decision(action, verdict) for action in GuardAction for verdict in Verdict
)
VERDICTS: tuple[Verdict, ...] = tuple(Verdict)


def bucket_of(seconds: float) -> int:
    """The index of the bucket a step of ``seconds`` falls in (the last one: +Inf)."""
    for i, bound in enumerate(STEP_BUCKETS_S):
        if seconds <= bound:
            return i
    return len(STEP_BUCKETS_S)


@dataclass(frozen=True)
class Histogram:
    """Steps by bucket (not cumulative; the last bucket +Inf) and their seconds summed."""

    counts: tuple[int, ...] = (0,) * BUCKETS
    sum_s: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, steps at or under it), as Prometheus' ``le`` buckets; +Inf last."""
        out, running = [], 0
        for bound, n in zip((*STEP_BUCKETS_S, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def __add__(self, other: Histogram) -> Histogram:
        return Histogram(tuple(a + b for a, b in zip(self.counts, other.counts, strict=True)),
                         self.sum_s + other.sum_s)

    def to_dict(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sum_s": self.sum_s}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Histogram:
        counts = tuple(int(n) for n in data["counts"])
        if len(counts) != BUCKETS or any(n < 0 for n in counts):
            raise ValueError(f"a step histogram has {BUCKETS} counts of 0 or more, not {data['counts']!r}")
        return cls(counts, float(data["sum_s"]))


@dataclass(frozen=True)
class Totals:
    """An engine's counters: what only goes up, in one server's life or across its restarts."""

    #: the step histogram by phase (``StepPhase`` order)
    steps: tuple[Histogram, Histogram] = (Histogram(), Histogram())
    #: the guard's decisions, in ``DECISION_KEYS`` order
    decisions: tuple[int, ...] = (0,) * len(DECISION_KEYS)
    #: steps that ran past vLLM's deadline and returned, because the guard waited
    saved: int = 0
    #: engine deaths at a step, by the verdict on its workers (``Verdict`` order)
    deaths: tuple[int, ...] = (0,) * len(VERDICTS)

    def decided(self, action: GuardAction, verdict: Verdict) -> int:
        return self.decisions[DECISION_KEYS.index(Decision(action, verdict))]

    def died(self, verdict: Verdict) -> int:
        return self.deaths[VERDICTS.index(verdict)]

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            (self.steps[0] + other.steps[0], self.steps[1] + other.steps[1]),
            tuple(a + b for a, b in zip(self.decisions, other.decisions, strict=True)),
            self.saved + other.saved,
            tuple(a + b for a, b in zip(self.deaths, other.deaths, strict=True)),
        )

    def to_dict(self) -> dict[str, Any]:
        """As the carried file holds it: decisions and deaths keyed by their written forms."""
        return {
            "steps": {phase.label: self.steps[phase].to_dict() for phase in StepPhase},
            "decisions": {f"{d.action.value}/{d.verdict.name}": n
                          for d, n in zip(DECISION_KEYS, self.decisions, strict=True) if n},
            "saved": self.saved,
            "deaths": {v.name: n for v, n in zip(VERDICTS, self.deaths, strict=True) if n},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Totals:
        """The totals a ``to_dict`` wrote; ``ValueError``/``TypeError``/``KeyError`` if they are not."""
        steps = data["steps"]
        decisions = [0] * len(DECISION_KEYS)
        for key, n in dict(data.get("decisions", {})).items():
            action, _, verdict = str(key).partition("/")
            kind = Decision(GuardAction.parse(action), Verdict.parse(verdict))
            decisions[DECISION_KEYS.index(kind)] = _count(n)
        deaths = [0] * len(VERDICTS)
        for key, n in dict(data.get("deaths", {})).items():
            deaths[VERDICTS.index(Verdict.parse(key))] = _count(n)
        return cls((Histogram.from_dict(steps["forward"]), Histogram.from_dict(steps["sampling"])),
                   tuple(decisions), _count(data.get("saved", 0)), tuple(deaths))


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"a count is a whole number of 0 or more, not {value!r}")
    return value


def total(parts: Iterable[Totals]) -> Totals:
    out = Totals()
    for part in parts:
        out = out + part
    return out
