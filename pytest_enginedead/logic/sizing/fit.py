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

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: every term the model knows, in the order they are printed
TERMS = ("fixed", "per_seq", "per_token", "per_context_token", "per_window_context_token")

#: what each term multiplies, for people
TERM_UNITS = {
    "fixed": "s per step",
    "per_seq": "s per scheduled sequence",
    "per_token": "s per scheduled token",
    "per_context_token": "s per context token attended (full-attention layers)",
    "per_window_context_token": "s per context token attended (sliding-window layers)",
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
        }


@dataclass(frozen=True)
class Fit:
    """Seconds per unit of each term, and how well they explain the steps they came from."""

    terms: Mapping[str, float]
    #: the largest |predicted - measured| / measured over the fitted groups of steps
    worst_residual: float = 0.0
    #: that group's shape and times
    worst_step: Step | None = None
    worst_measured_s: float | None = None
    #: groups of like steps fitted (their median time each), and the steps in them
    groups: int = 0
    steps: int = 0
    #: where the numbers came from ("measured", "forecast to 30 layers from slices 1, 2")
    origin: str = "measured"
    points: tuple[tuple[Step, float], ...] = field(default=(), repr=False, compare=False)

    def predict(self, step: Step) -> float:
        return sum(value * step.feature(term) for term, value in self.terms.items())

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
                "predicted_s": self.predict(self.worst_step),
            },
            "groups": self.groups,
            "steps": self.steps,
            "origin": self.origin,
        }


class FitError(ValueError):
    """The steps cannot give a fit (none, or none with a positive time); the message says why."""


def group_steps(samples: Iterable[tuple[Step, float]], bucket: float = 0.05) -> list[tuple[Step, float, int]]:
    """Like steps pooled: same sequences and tokens, context within ``bucket`` (relative).

    Each group is its steps' mean shape and median time, and how many steps it holds:
    single steps on a shared 2-core machine are noisy, a group's median is not.
    """
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
    out = []
    for members in groups.values():
        n = len(members)
        windows = [s.window_context_tokens for s, _ in members]
        shape = Step(
            members[0][0].seqs,
            members[0][0].tokens,
            round(sum(s.context_tokens for s, _ in members) / n),
            None if any(w is None for w in windows) else round(sum(w or 0 for w in windows) / n),
        )
        out.append((shape, statistics.median(t for _, t in members), n))
    return sorted(out, key=lambda g: (g[0].seqs, g[0].tokens, g[0].context_tokens))


def _bucket(value: int, width: float) -> int:
    return 0 if value <= 0 else 1 + int(math.log(value) / math.log1p(width))


def fit_steps(samples: Iterable[tuple[Step, float]], terms: Sequence[str], origin: str = "measured") -> Fit:
    """Non-negative least squares in relative error, over groups of like steps."""
    unknown = [t for t in terms if t not in TERMS]
    if unknown:
        raise FitError(f"unknown terms {unknown}; known: {', '.join(TERMS)}")
    grouped = group_steps(samples)
    if not grouped:
        raise FitError("no finished step with a positive time to fit")
    coef = nnls_relative([[g.feature(t) for t in terms] for g, _, _ in grouped], [s for _, s, _ in grouped])
    return _finish(dict(zip(terms, coef, strict=True)), grouped, origin)


def nnls_relative(features: Sequence[Sequence[float]], seconds: Sequence[float]) -> list[float]:
    """Coefficients >= 0 minimising the relative error of ``features . coef`` against ``seconds``.

    Every subset of the columns is solved unconstrained; the best solution with no
    negative coefficient is the non-negative optimum (exact, and cheap for the
    handful of terms a step model has).
    """
    rows = [[f / s for f in row] for row, s in zip(features, seconds, strict=True)]
    k = len(rows[0]) if rows else 0
    best: tuple[float, list[float]] | None = None
    for size in range(1, k + 1):
        for subset in itertools.combinations(range(k), size):
            solution = _least_squares([[r[i] for i in subset] for r in rows])
            if solution is None or any(v < 0 for v in solution):
                continue
            coef = [0.0] * k
            for i, v in zip(subset, solution, strict=True):
                coef[i] = v
            sse = sum((sum(c * x for c, x in zip(coef, r, strict=True)) - 1.0) ** 2 for r in rows)
            if best is None or sse < best[0] - 1e-15:
                best = (sse, coef)
    if best is None:
        raise FitError(f"no non-negative fit of {k} terms to {len(rows)} groups of steps")
    return best[1]


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


def _least_squares(rows: Sequence[Sequence[float]]) -> list[float] | None:
    """argmin ||rows x - 1||, columns scaled to unit norm first; None when singular."""
    if not rows:
        return None
    k = len(rows[0])
    norms = [math.sqrt(sum(r[j] ** 2 for r in rows)) for j in range(k)]
    if any(n == 0 for n in norms):
        return None
    scaled = [[r[j] / norms[j] for j in range(k)] for r in rows]
    # normal equations, solved with partial pivoting
    a = [[sum(r[i] * r[j] for r in scaled) for j in range(k)] + [sum(r[i] for r in scaled)] for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda i: abs(a[i][col]))
        if abs(a[pivot][col]) < 1e-10:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for i in range(k):
            if i != col:
                factor = a[i][col] / a[col][col]
                for j in range(col, k + 1):
                    a[i][j] -= factor * a[col][j]
    return [a[i][k] / a[i][i] / norms[i] for i in range(k)]
