"""The step cost model: one step's time as a sum of terms, fitted on measured steps.

A step is what the scheduler put in it (``Step``): sequences, tokens, and the keys
its queries attend, summed over the step's tokens, once as full attention sees them
and once capped at the sliding window.  Its time is modelled as

    fixed + per_seq x seqs + per_token x tokens
          + per_context_token x context_tokens            (full-attention layers)
          + per_window_context_token x window_context_tokens  (sliding-window layers)

with every term >= 0 (a step never gets cheaper by doing more).  The fit minimises
the *relative* error, so a 30 ms decode step counts as much as an 8 s prefill step:
the answer is a deadline, and a deadline is wrong by a ratio, not by seconds.

Pure: no vLLM, no engines; the numbers come from ``record.StepTime`` rows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from . import solve

#: every term the model knows, in the order they are printed
TERMS = ("fixed", "per_seq", "per_token", "per_context_token", "per_window_context_token", "per_read_token",
         "per_window_read_token")

#: what each term multiplies, for people
TERM_UNITS = {
    "fixed": "s per step",
    "per_seq": "s per scheduled sequence",
    "per_token": "s per scheduled token",
    "per_context_token": "s per context token attended (full-attention layers)",
    "per_window_context_token": "s per context token attended (sliding-window layers)",
    "per_read_token": "s per context token read, once per sequence (full-attention layers)",
    "per_window_read_token": "s per context token read, once per sequence (sliding-window layers)",
}


@dataclass(frozen=True)
class Step:
    """What one engine step scheduled.

    ``context_tokens``: keys attended, summed over the step's tokens (a decode at
    context 500 attends 500; a 100-token chunk after 400 computed tokens attends
    401 + ... + 500).  ``window_context_tokens``: the same with each token's keys
    capped at the sliding window (equal to ``context_tokens`` without a window).
    """

    seqs: int
    tokens: int
    context_tokens: int
    window_context_tokens: int | None = None
    #: keys its sequences read from the KV cache, each sequence's context once (a decode at
    #: context 500 reads 500, as it attends; a 100-token chunk after 400 reads 500 for all its
    #: 100 queries); the same within the window.  None: as attended (a record that does not say)
    read_tokens: int | None = None
    window_read_tokens: int | None = None

    @property
    def read(self) -> int:
        return self.context_tokens if self.read_tokens is None else self.read_tokens

    @property
    def window_read(self) -> int:
        if self.window_read_tokens is not None:
            return self.window_read_tokens
        if self.read_tokens is not None:
            return self.read_tokens
        return self.context_tokens if self.window_context_tokens is None else self.window_context_tokens

    def feature(self, term: str) -> float:
        if term == "fixed":
            return 1.0
        if term == "per_seq":
            return float(self.seqs)
        if term == "per_token":
            return float(self.tokens)
        if term == "per_context_token":
            return float(self.context_tokens)
        if term == "per_window_context_token":
            window = self.window_context_tokens
            return float(self.context_tokens if window is None else window)
        if term == "per_read_token":
            return float(self.read)
        if term == "per_window_read_token":
            return float(self.window_read)
        raise KeyError(term)

    def describe(self) -> str:
        text = f"{self.seqs} seqs, {self.tokens} tokens, {self.context_tokens:,} context tokens"
        if self.window_context_tokens is not None and self.window_context_tokens != self.context_tokens:
            text += f" ({self.window_context_tokens:,} in the window)"
        return text

    def as_dict(self) -> dict[str, int | None]:
        return {
            "seqs": self.seqs,
            "tokens": self.tokens,
            "context_tokens": self.context_tokens,
            "window_context_tokens": self.window_context_tokens,
            "read_tokens": self.read_tokens,
            "window_read_tokens": self.window_read_tokens,
        }


#: one-sided 95 %: the interval's upper end is the prediction + Z standard deviations
Z = 1.645


@dataclass(frozen=True)
class Uncertainty:
    """How far a prediction may be off: the terms' covariance (from the fit) and the spread of
    repeated steps of one shape (the same step twice is not the same time twice)."""

    #: the terms the covariance is over, in its order
    terms: tuple[str, ...]
    covariance: tuple[tuple[float, ...], ...]
    #: relative standard deviation of a step about the median of its like steps
    spread: float = 0.0
    z: float = Z

    def sd(self, step: Step, predicted: float) -> float:
        """Standard deviation of one step's time, in seconds: the fit's and the step's own."""
        x = [step.feature(t) for t in self.terms]
        return math.sqrt(solve.quadratic(self.covariance, x) + (self.spread * predicted) ** 2)

    def term_sd(self) -> dict[str, float]:
        return {t: math.sqrt(max(0.0, self.covariance[i][i])) for i, t in enumerate(self.terms)}

    def as_dict(self) -> dict[str, object]:
        return {"z": self.z, "step_spread": self.spread,
                "terms_sd": {f"{t}_s": v for t, v in self.term_sd().items()}}


@dataclass(frozen=True)
class Fit:
    """Seconds per unit of each term, and how well they explain the steps they came from."""

    terms: Mapping[str, float]
    #: the largest |predicted - measured| / measured over the fitted groups of steps
    worst_residual: float = 0.0
    #: that group's shape and times
    worst_step: Step | None = None
    worst_measured_s: float | None = None
    #: where that group was measured, and what the fit predicts there, when not on the model the
    #: terms are for (a forecast's slice: the full model's terms would predict it at full depth)
    worst_measured_on: str | None = None
    worst_predicted_s: float | None = None
    #: groups of like steps fitted (their median time each), and the steps in them
    groups: int = 0
    steps: int = 0
    #: where the numbers came from ("measured", "forecast to 30 layers from slices 1, 2")
    origin: str = "measured"
    points: tuple[tuple[Step, float], ...] = field(default=(), repr=False, compare=False)
    uncertainty: Uncertainty | None = field(default=None, repr=False, compare=False)

    def predict(self, step: Step) -> float:
        return sum(value * step.feature(term) for term, value in self.terms.items())

    def interval(self, step: Step) -> tuple[float, float]:
        """The prediction's interval: +- z standard deviations (the fit's and the step's own)."""
        p = self.predict(step)
        if self.uncertainty is None:
            return p, p
        sd = self.uncertainty.sd(step, p)
        return max(0.0, p - self.uncertainty.z * sd), p + self.uncertainty.z * sd

    def upper(self, step: Step) -> float:
        """The interval's upper end: what the advice is taken from."""
        return self.interval(step)[1]

    def as_dict(self) -> dict[str, object]:
        return {
            "terms": {f"{t}_s": self.terms[t] for t in TERMS if t in self.terms},
            "form": " + ".join(
                "fixed" if t == "fixed" else f"{t} x {t.removeprefix('per_')}s" for t in self.terms
            ),
            "worst_residual": self.worst_residual,
            "worst_residual_step": None
            if self.worst_step is None
            else {
                **self.worst_step.as_dict(),
                "measured_s": self.worst_measured_s,
                "predicted_s": self.predict(self.worst_step)
                if self.worst_predicted_s is None
                else self.worst_predicted_s,
                **({"measured_on": self.worst_measured_on} if self.worst_measured_on else {}),
            },
            "groups": self.groups,
            "steps": self.steps,
            "origin": self.origin,
            "uncertainty": None if self.uncertainty is None else self.uncertainty.as_dict(),
        }


class FitError(ValueError):
    """The steps cannot give a fit (none, or none with a positive time); the message says why."""


def group_steps(samples: Iterable[tuple[Step, float]], bucket: float = 0.05) -> list[tuple[Step, float, int]]:
    """Like steps pooled: same sequences and tokens, context within ``bucket`` (relative).

    Each group is its steps' mean shape and median time, and how many steps it holds:
    single steps on a shared 2-core machine are noisy, a group's median is not.
    """
    groups = _grouped(samples, bucket)
    out = []
    for members in groups.values():
        shapes = [s for s, _ in members]
        shape = Step(
            shapes[0].seqs,
            shapes[0].tokens,
            _mean([s.context_tokens for s in shapes]) or 0,
            _mean([s.window_context_tokens for s in shapes]),
            _mean([s.read_tokens for s in shapes]),
            _mean([s.window_read_tokens for s in shapes]),
        )
        out.append((shape, statistics.median(t for _, t in members), len(members)))
    return sorted(out, key=lambda g: (g[0].seqs, g[0].tokens, g[0].context_tokens))


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
        window = step.window_context_tokens
        key = (
            step.seqs,
            step.tokens,
            _bucket(step.context_tokens, bucket),
            _bucket(step.context_tokens if window is None else window, bucket),
        )
        groups.setdefault(key, []).append((step, seconds))
    return groups


def _members(samples: Iterable[tuple[Step, float]]) -> dict[tuple[int, int, int, int], list[float]]:
    return {k: [t for _, t in v] for k, v in _grouped(samples).items()}


def _bucket(value: int, width: float) -> int:
    return 0 if value <= 0 else 1 + int(math.log(value) / math.log1p(width))


def fit_steps(samples: Iterable[tuple[Step, float]], terms: Sequence[str], origin: str = "measured") -> Fit:
    """Non-negative least squares in relative error, over groups of like steps."""
    unknown = [t for t in terms if t not in TERMS]
    if unknown:
        raise FitError(f"unknown terms {unknown}; known: {', '.join(TERMS)}")
    samples_list = list(samples)
    grouped = group_steps(samples_list)
    if not grouped:
        raise FitError("no finished step with a positive time to fit")
    rows = [[g.feature(t) / s for t in terms] for g, s, _ in grouped]
    coef = solve.nnls(rows, [1.0] * len(rows))
    fitted = _finish(dict(zip(terms, coef, strict=True)), grouped, origin)
    cov = solve.bootstrap_covariance(rows, coef)
    spread = step_spread(samples_list)
    return replace(fitted, uncertainty=Uncertainty(tuple(terms), _frozen(cov), spread))


def _frozen(m: Sequence[Sequence[float]]) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(r) for r in m)


def step_spread(*engines: Iterable[tuple[Step, float]]) -> float:
    """Relative standard deviation of a step about the median of its like steps on the same engine
    (robust: 1.4826 x the median absolute deviation, pooled over every group of two or more)."""
    deviations = []
    for samples in engines:
        for members in _members(samples).values():
            if len(members) < 2:
                continue
            mid = statistics.median(members)
            deviations += [abs(t / mid - 1) for t in members]
    if not deviations:
        return 0.0
    return 1.4826 * statistics.median(deviations)


def nnls_relative(features: Sequence[Sequence[float]], seconds: Sequence[float]) -> list[float]:
    """Coefficients >= 0 minimising the relative error of ``features . coef`` against ``seconds``
    (``solve.nnls``: every subset of the terms solved, the best with none negative)."""
    rows = [[f / s for f in row] for row, s in zip(features, seconds, strict=True)]
    try:
        return solve.nnls(rows, [1.0] * len(rows))
    except solve.SolveError:
        raise FitError(f"no non-negative fit of {len(rows[0]) if rows else 0} terms to {len(rows)} groups "
                       "of steps") from None


def _finish(coef: Mapping[str, float], grouped: Sequence[tuple[Step, float, int]], origin: str) -> Fit:
    fit = Fit(dict(coef), origin=origin)
    worst, worst_at = 0.0, None
    for shape, seconds, _ in grouped:
        residual = abs(fit.predict(shape) - seconds) / seconds
        if worst_at is None or residual > worst:
            worst, worst_at = residual, (shape, seconds)
    return Fit(
        dict(coef),
        worst,
        worst_at[0] if worst_at else None,
        worst_at[1] if worst_at else None,
        groups=len(grouped),
        steps=sum(n for _, _, n in grouped),
        origin=origin,
        points=tuple((s, t) for s, t, _ in grouped),
    )
