"""The step cost model fitted on measured steps: terms, how sure they are, how well they fit.

A step's time is a sum of terms (``terms.py``: per step, per sequence, per token, per
expert reached, per key attended and read), every term >= 0 (a step never gets cheaper by
doing more).  The fit minimises the *relative* error, so a 30 ms decode step counts as
much as an 8 s prefill step: the answer is a deadline, and a deadline is wrong by a
ratio, not by seconds.

How sure (``Uncertainty``): the terms' covariance (a bootstrap, ``solve``), the spread of
repeated steps of one shape, and the misfit the terms leave on the groups they were
fitted to; every prediction has an interval of +- ``Z`` standard deviations, a ``LEVEL``
(90 %) interval, whose upper end the advice is taken from.

Pure: no vLLM, no engines; the numbers come from ``contract.steps.StepTime`` rows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from . import solve
from .terms import TERM_UNITS, TERMS, Routing, Step, features

__all__ = [
    "LEVEL",
    "TERMS",
    "TERM_UNITS",
    "Fit",
    "FitError",
    "Residual",
    "Step",
    "Uncertainty",
    "Z",
    "fit_steps",
    "group_steps",
    "misfit",
    "step_spread",
]

#: the interval's stated level: the prediction +- Z standard deviations holds the step this often
LEVEL = 0.90
#: two-sided 90 % (one-sided 95 %: the upper end, which the advice is taken from)
Z = 1.645


@dataclass(frozen=True)
class Uncertainty:
    """How far a prediction may be off: the terms' covariance (from the fit), the spread of repeated
    steps of one shape (the same step twice is not the same time twice), and the misfit the terms
    leave on the groups they were fitted to (a shape the model does not follow exactly)."""

    #: the terms the covariance is over, in its order
    terms: tuple[str, ...]
    covariance: tuple[tuple[float, ...], ...]
    #: relative standard deviation of a step about the median of its like steps
    spread: float = 0.0
    #: relative standard deviation of a group about the model, beyond what the spread explains
    misfit: float = 0.0
    z: float = Z

    def sd(self, x: Sequence[float], predicted: float) -> float:
        """Standard deviation of one step's time, in seconds, given its features (``terms``' order)."""
        own = (self.spread**2 + self.misfit**2) * predicted**2
        return math.sqrt(solve.quadratic(self.covariance, x) + own)

    def widened(self, apart: Mapping[str, float]) -> Uncertainty:
        """This uncertainty with a second reading of the terms beside the one kept: half their
        difference ``apart`` (by term) added as a spread of its own, so that the interval holds
        both readings where the steps could not choose between them."""
        if not apart:
            return self
        d = [apart.get(t, 0.0) / 2 for t in self.terms]
        cov = [[c + d[i] * d[j] for j, c in enumerate(row)] for i, row in enumerate(self.covariance)]
        return replace(self, covariance=tuple(tuple(row) for row in cov))

    def term_sd(self) -> dict[str, float]:
        return {t: math.sqrt(max(0.0, self.covariance[i][i])) for i, t in enumerate(self.terms)}


@dataclass(frozen=True)
class Residual:
    """The group of steps the fit explains worst: its shape, its median time and the prediction, and
    where it was measured when not on the model the terms are for (a forecast's slice)."""

    step: Step
    measured_s: float
    predicted_s: float
    measured_on: str | None = None

    @property
    def relative(self) -> float:
        return abs(self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class Fit:
    """Seconds per unit of each term, and how well they explain the steps they came from."""

    terms: Mapping[str, float]
    #: a mixture of experts' routing (what ``per_expert`` multiplies); None for a dense model
    routing: Routing | None = None
    worst: Residual | None = None
    #: groups of like steps fitted (their median time each), and the steps in them
    groups: int = 0
    steps: int = 0
    #: where the numbers came from ("measured", "forecast to 30 layers from 2 slices")
    origin: str = "measured"
    points: tuple[tuple[Step, float], ...] = field(default=(), repr=False, compare=False)
    uncertainty: Uncertainty | None = field(default=None, repr=False, compare=False)

    @property
    def worst_residual(self) -> float:
        """The largest |predicted - measured| / measured over the fitted groups."""
        return 0.0 if self.worst is None else self.worst.relative

    def features(self, step: Step, terms: Sequence[str] | None = None) -> list[float]:
        return features(step, list(self.terms) if terms is None else terms, self.routing)

    def predict(self, step: Step) -> float:
        return sum(v * x for v, x in zip(self.terms.values(), self.features(step), strict=True))

    def sd(self, step: Step) -> float:
        if self.uncertainty is None:
            return 0.0
        return self.uncertainty.sd(self.features(step, self.uncertainty.terms), self.predict(step))

    def interval(self, step: Step) -> tuple[float, float]:
        """The prediction's interval: +- z standard deviations (the fit's, the step's own, the misfit)."""
        p = self.predict(step)
        if self.uncertainty is None:
            return p, p
        half = self.uncertainty.z * self.uncertainty.sd(self.features(step, self.uncertainty.terms), p)
        return max(0.0, p - half), p + half

    def upper(self, step: Step) -> float:
        """The interval's upper end: what the advice is taken from."""
        return self.interval(step)[1]


class FitError(ValueError):
    """The steps cannot give a fit (none, or none with a positive time); the message says why."""


def group_steps(samples: Iterable[tuple[Step, float]], bucket: float = 0.05) -> list[tuple[Step, float, int]]:
    """Like steps pooled: same sequences and tokens, context within ``bucket`` (relative).

    Each group is its steps' mean shape and median time, and how many steps it holds:
    single steps on a shared 2-core machine are noisy, a group's median is not.
    """
    out = []
    for members in _grouped(samples, bucket).values():
        shape = mean_shape([s for s, _ in members])
        out.append((shape, statistics.median(t for _, t in members), len(members)))
    return sorted(out, key=lambda g: (g[0].seqs, g[0].tokens, g[0].context_tokens))


def mean_shape(shapes: Sequence[Step]) -> Step:
    """Like steps' mean shape: the first's sequences and tokens, their keys averaged."""
    return Step(
        shapes[0].seqs,
        shapes[0].tokens,
        _mean([s.context_tokens for s in shapes]) or 0,
        _mean([s.window_context_tokens for s in shapes]),
        _mean([s.read_tokens for s in shapes]),
        _mean([s.window_read_tokens for s in shapes]),
    )


def _mean(values: Sequence[int | None]) -> int | None:
    """The rounded mean, or None if any is unknown."""
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known)) if known and len(known) == len(values) else None


def _grouped(samples: Iterable[tuple[Step, float]], bucket: float = 0.05
             ) -> dict[tuple[int, int, int, int], list[tuple[Step, float]]]:
    groups: dict[tuple[int, int, int, int], list[tuple[Step, float]]] = {}
    for step, seconds in samples:
        if not (seconds > 0 and math.isfinite(seconds)):
            continue
        key = (step.seqs, step.tokens, _bucket(step.context_tokens, bucket),
               _bucket(step.window_context, bucket))
        groups.setdefault(key, []).append((step, seconds))
    return groups


def _bucket(value: int, width: float) -> int:
    return 0 if value <= 0 else 1 + int(math.log(value) / math.log1p(width))


def step_spread(*engines: Iterable[tuple[Step, float]]) -> float:
    """Relative standard deviation of a step about the median of its like steps on the same engine
    (robust: 1.4826 x the median absolute deviation, pooled over every group of two or more)."""
    deviations = []
    for samples in engines:
        for members in _grouped(samples).values():
            times = [t for _, t in members]
            if len(times) < 2:
                continue
            mid = statistics.median(times)
            deviations += [abs(t / mid - 1) for t in times]
    if not deviations:
        return 0.0
    return 1.4826 * statistics.median(deviations)


def misfit(relative_residuals: Sequence[float], parameters: int, spread: float) -> float:
    """The groups' relative scatter about the model beyond what repeated steps' spread explains (each
    group a median of a few steps): sqrt(sum r^2 / (n - p) - spread^2 / 2), 0 when the fit leaves
    nothing more."""
    free = len(relative_residuals) - parameters
    if free <= 0:
        return 0.0
    scatter = sum(r * r for r in relative_residuals) / free
    return math.sqrt(max(0.0, scatter - spread**2 / 2))


def fit_steps(samples: Iterable[tuple[Step, float]], terms: Sequence[str], origin: str = "measured",
              routing: Routing | None = None) -> Fit:
    """Non-negative least squares in relative error, over groups of like steps."""
    unknown = [t for t in terms if t not in TERMS]
    if unknown:
        raise FitError(f"unknown terms {unknown}; known: {', '.join(TERMS)}")
    samples_list = list(samples)
    grouped = group_steps(samples_list)
    if not grouped:
        raise FitError("no finished step with a positive time to fit")
    rows = [[x / s for x in features(g, terms, routing)] for g, s, _ in grouped]
    try:
        coef = solve.nnls(rows, [1.0] * len(rows))
    except solve.SolveError:
        raise FitError(f"no non-negative fit of {len(terms)} terms to {len(rows)} groups of steps") from None
    fitted = Fit(dict(zip(terms, coef, strict=True)), routing, origin=origin)
    residuals = [(fitted.predict(g) - s) / s for g, s, _ in grouped]
    worst = max(range(len(grouped)), key=lambda i: abs(residuals[i]))
    spread = step_spread(samples_list)
    active = sum(1 for c in coef if c > 0)
    uncertainty = Uncertainty(tuple(terms), _frozen(solve.bootstrap_covariance(rows, coef)), spread,
                              misfit(residuals, active, spread))
    shape, seconds, _ = grouped[worst]
    return replace(fitted, worst=Residual(shape, seconds, fitted.predict(shape)), groups=len(grouped),
                   steps=sum(n for _, _, n in grouped), points=tuple((s, t) for s, t, _ in grouped),
                   uncertainty=uncertainty)


def _frozen(m: Sequence[Sequence[float]]) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(r) for r in m)
