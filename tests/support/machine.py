"""What this machine measures: the sizes of engine tests that need a step to outlive a deadline.

A test that wants "this step dies under the deadline, that one lives" cannot hard-code a
batch: on a box twice as fast the dying batch lives, on one twice as slow the living one
dies.  So the engine tests measure decode steps of the model on this machine first
(``calibration.measure``: one-token prompts, so a step of n sequences processes n tokens),
fit ``a + b x n`` (``StepCost``), and derive their sizes from it with stated margins:

* a living step is predicted to take at most ``LIVE`` (half) of the deadline;
* a dying step at least ``DIE`` (2.5) deadlines: twice the deadline, so that the step is
  still running when the verdict looks, plus a quarter for the fit's error.

When no batch the engine can hold reaches the dying margin (a fast machine), the test
skips and says so.  Pure: no vLLM here (the measuring is ``tests/engine/conftest.py``'s).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

#: a living step takes at most this share of the deadline
LIVE = 0.5
#: a dying step takes at least this many deadlines (2 x, and 25 % for the fit)
DIE = 2.5


class FlatSteps(ValueError):
    """The measured steps do not grow with the batch: the per-sequence cost is below what this
    machine's noise lets a few steps resolve (a fast box, a small model, a busy neighbour)."""


@dataclass(frozen=True)
class StepCost:
    """A model's decode step on this machine: ``a_s + b_s x n`` for n one-token sequences."""

    model: str
    a_s: float
    b_s: float
    #: the p50 per batch size the fit came from
    measured: Mapping[int, float]

    @classmethod
    def fit(cls, model: str, results: Iterable[Mapping[str, float]]) -> StepCost:
        """Least squares over ``calibration.measure``'s p50 per batch size."""
        points = {int(r["batch_size"]): float(r["p50_s"]) for r in results}
        if len(points) < 2:
            raise ValueError(f"a fit needs two batch sizes, got {sorted(points)}")
        xs, ys = list(points), list(points.values())
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
        if b <= 0:
            shown = ", ".join(f"{n}: {s:.4f} s" for n, s in sorted(points.items()))
            raise FlatSteps(f"step time does not grow with the batch on {model} (p50 at batch {shown})")
        return cls(model, my - b * mx, b, points)

    def predict(self, n: float) -> float:
        return self.a_s + self.b_s * n

    def living(self, deadline_s: float, candidates: Sequence[int]) -> int | None:
        """The largest of ``candidates`` whose step is at most ``LIVE`` x the deadline."""
        fit = [n for n in candidates if self.predict(n) <= LIVE * deadline_s]
        return max(fit) if fit else None

    def dying(self, deadline_s: float, most: int) -> int | None:
        """The smallest batch whose step is at least ``DIE`` x the deadline, if it is <= ``most``."""
        n = max(1, math.ceil((DIE * deadline_s - self.a_s) / self.b_s))
        return n if n <= most else None

    def deadline(self, living_tokens: int) -> int:
        """The smallest whole-second deadline (vLLM's unit, >= 1) a step of this many lives under."""
        return max(1, math.ceil(self.predict(living_tokens) / LIVE))

    def describe(self) -> str:
        points = ", ".join(f"{n}: {s:.3f} s" for n, s in sorted(self.measured.items()))
        return f"{self.a_s:.4f} s + {self.b_s * 1000:.3f} ms x n (p50 at batch {points})"


@dataclass(frozen=True)
class DeathSizes:
    """The sizes one test runs with, derived from this machine's steps."""

    deadline_s: int
    living: int  # sequences in a step that lives
    dying: int  # sequences in a step that dies
    cost: StepCost

    def describe(self) -> str:
        c = self.cost
        return (
            f"sized on this machine ({c.describe()}): deadline {self.deadline_s} s; batch {self.living} "
            f"lives ({c.predict(self.living):.2f} s predicted, <= {LIVE:g} x), batch {self.dying} dies "
            f"({c.predict(self.dying):.2f} s predicted, >= {DIE:g} x)"
        )


def death_sizes(
    cost: StepCost, most: int, living: Sequence[int] = (8, 4, 2, 1), tokens_per_seq: int = 1
) -> DeathSizes | str:
    """Sizes for "batch ``living`` lives, batch ``dying`` dies", or why this machine has none.

    The deadline is the smallest whole second a living step (of ``tokens_per_seq``-token
    prompts, costed as that many one-token sequences: a prompt token costs at most what a
    decoding sequence does) stays under with the margin; the dying batch is costed as one-
    token sequences, which its longer prompts only make slower.
    """
    deadline = min(cost.deadline(n * tokens_per_seq) for n in living)
    alive = max((n for n in living if cost.predict(n * tokens_per_seq) <= LIVE * deadline), default=None)
    if alive is None:  # cannot happen: the deadline was chosen for the smallest
        return f"no batch of {list(living)} lives under a {deadline} s deadline on this machine"
    dying = cost.dying(deadline, most)
    if dying is None:
        return (
            f"this machine is too fast for the test: no batch up to {most} takes {DIE:g} x the "
            f"{deadline} s deadline ({cost.describe()}; batch {most} is predicted "
            f"{cost.predict(most):.2f} s)"
        )
    return DeathSizes(deadline, alive, dying, cost)


#: the batch sizes Gemma-4's decode step cost is measured at, by the Gemma test and the
#: check's (one measurement serves both).  Small enough that the measurement stays well
#: inside its budget on a slow box: on 0.27.1 on the 2-core AVX2 box a batch-64 step is
#: 12 s, and measuring at 8/32/64 took the whole 600 s.
GEMMA_MEASURED_AT = (4, 16, 32)


class Measures(Protocol):
    """The ``step_cost`` fixture: a model's steps measured once per session and set of cores."""

    def __call__(self, model: Path, batch_sizes: Sequence[int], steps: int = 6) -> StepCost:
        """The fit of the steps (skips the test when this machine cannot size it)."""

    def calibration(self, model: Path, batch_sizes: Sequence[int], steps: int = 6) -> dict[str, Any]:
        """The JSON of the ``enginedead calibrate`` run the fit comes from."""
