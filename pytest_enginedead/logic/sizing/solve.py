"""Non-negative least squares for the step model, with floors, and its uncertainty by bootstrap.

The step model is fitted in relative error: each measured group of steps is a row
``x_i / t_i`` (its features over its time) and the target is 1.  The normal equations
(``G = R'R``, ``h = R'y``) are formed once; every subset of the terms is solved on them
and the best solution with no coefficient below its floor is the optimum (exact, and
cheap for the handful of terms a step model has).  A floor ``l`` is a change of
variable ``c = l + c'``, ``c' >= 0``.

The uncertainty is a wild bootstrap: the fitted values plus each row's residual with a
random sign (leverage-corrected, so that the few long-context rows a forecast leans on
count their full noise), refitted; the covariance of the refitted coefficients is what a
forecast's interval is made from.  Seeded: the same steps give the same interval.

Pure: lists of floats, no numpy.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

Matrix = list[list[float]]

#: bootstrap replicates: enough for a covariance to settle to a few per cent
REPLICATES = 200
SEED = 20261204


class SolveError(ValueError):
    """No solution with every coefficient at or above its floor."""


def normal_equations(rows: Sequence[Sequence[float]], target: Sequence[float]) -> tuple[Matrix, list[float]]:
    k = len(rows[0]) if rows else 0
    g = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    h = [sum(r[i] * y for r, y in zip(rows, target, strict=True)) for i in range(k)]
    return g, h


def _solve(a: Matrix, b: list[float]) -> list[float] | None:
    """``a x = b`` for a small symmetric system, scaled to unit diagonal; None when singular."""
    k = len(b)
    d = [math.sqrt(a[i][i]) if a[i][i] > 0 else 0.0 for i in range(k)]
    if any(v == 0 for v in d):
        return None
    m = [[a[i][j] / (d[i] * d[j]) for j in range(k)] + [b[i] / d[i]] for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda i: abs(m[i][col]))
        if abs(m[pivot][col]) < 1e-10:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for i in range(k):
            if i != col:
                factor = m[i][col] / m[col][col]
                if factor:
                    for j in range(col, k + 1):
                        m[i][j] -= factor * m[col][j]
    return [m[i][k] / m[i][i] / d[i] for i in range(k)]


def _kkt(g: Matrix, shifted: Sequence[float], subset: Sequence[int]) -> list[float] | None:
    """The solution on ``subset`` if it is the optimum (no coefficient below 0, no other term that
    would lower the error by rising: the conditions are sufficient, the problem is convex)."""
    k = len(shifted)
    sol = _solve([[g[i][j] for j in subset] for i in subset], [shifted[i] for i in subset]) if subset else []
    if sol is None or any(v < 0 for v in sol):
        return None
    extra = [0.0] * k
    for i, v in zip(subset, sol, strict=True):
        extra[i] = v
    scale = max(1e-300, max(abs(v) for v in shifted))
    for i in range(k):
        if i not in subset and shifted[i] - sum(g[i][j] * extra[j] for j in range(k)) > 1e-9 * scale:
            return None
    return extra


def nnls_normal(g: Matrix, h: Sequence[float], lower: Sequence[float] | None = None,
                guess: Sequence[int] | None = None) -> list[float]:
    """argmin ||R c - y||^2 with ``c >= lower`` (0 where not given), from ``G = R'R`` and ``h = R'y``.

    ``guess``: the terms likely above their floors (a bootstrap's: the fit's own), tried first.
    """
    k = len(h)
    low = list(lower) if lower is not None else [0.0] * k
    # c = low + c': the target becomes y - R low, so h' = h - G low (and ||.||^2 shifts by a constant)
    shifted = [h[i] - _dot(g[i], low) for i in range(k)]
    found = _kkt(g, shifted, list(guess)) if guess is not None else None
    if found is None:
        found = _best_subset(g, shifted)
    return [low[i] + found[i] for i in range(k)]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _on_subset(g: Matrix, shifted: Sequence[float], subset: Sequence[int]) -> list[float] | None:
    """The unconstrained solution on ``subset`` (0 elsewhere), or None when singular or negative."""
    extra = [0.0] * len(shifted)
    if not subset:
        return extra
    sol = _solve([[g[i][j] for j in subset] for i in subset], [shifted[i] for i in subset])
    if sol is None or any(v < 0 for v in sol):
        return None
    for i, v in zip(subset, sol, strict=True):
        extra[i] = v
    return extra


def _best_subset(g: Matrix, shifted: Sequence[float]) -> list[float]:
    """Every subset of the terms solved; the one of least error with none below 0."""
    k = len(shifted)
    best: tuple[float, list[float]] | None = None
    for subset in itertools.chain.from_iterable(itertools.combinations(range(k), n) for n in range(k + 1)):
        extra = _on_subset(g, shifted, subset)
        if extra is None:
            continue
        # ||R c' - y'||^2 - ||y'||^2 = c'G c' - 2 c'h'
        sse = sum(extra[i] * _dot(g[i], extra) for i in range(k)) - 2 * _dot(extra, shifted)
        if best is None or sse < best[0] - 1e-15 * max(1.0, abs(best[0])):
            best = (sse, extra)
    if best is None:
        raise SolveError(f"no fit of {k} terms at or above their floors")
    return best[1]


def nnls(rows: Sequence[Sequence[float]], target: Sequence[float],
         lower: Sequence[float] | None = None) -> list[float]:
    g, h = normal_equations(rows, target)
    return nnls_normal(g, h, lower)


def leverages(rows: Sequence[Sequence[float]], active: Sequence[int]) -> list[float]:
    """Each row's leverage (the hat matrix's diagonal) over the active columns; 0 where singular."""
    if not active:
        return [0.0] * len(rows)
    sub = [[r[i] for i in active] for r in rows]
    g, _ = normal_equations(sub, [0.0] * len(sub))
    k = len(active)
    inverse_cols = []
    for col in range(k):
        unit = [1.0 if i == col else 0.0 for i in range(k)]
        sol = _solve(g, unit)
        if sol is None:
            return [0.0] * len(rows)
        inverse_cols.append(sol)
    out = []
    for r in sub:
        v = sum(r[i] * inverse_cols[j][i] * r[j] for i in range(k) for j in range(k))
        out.append(min(0.99, max(0.0, v)))
    return out


def bootstrap_covariance(
    rows: Sequence[Sequence[float]],
    coef: Sequence[float],
    lower: Sequence[float] | None = None,
    replicates: int = REPLICATES,
    seed: int = SEED,
) -> Matrix:
    """Covariance of the coefficients, by a wild bootstrap of the relative residuals (target 1)."""
    k = len(coef)
    if len(rows) <= 1:
        return _zeros(k)
    floor = list(lower) if lower is not None else [0.0] * k
    active = [i for i in range(k) if coef[i] > floor[i] + 1e-300]
    fitted = [_dot(coef, r) for r in rows]
    scaled = _inflated([1.0 - f for f in fitted], leverages(rows, active), len(rows), max(1, len(active)))
    g, _ = normal_equations(rows, fitted)
    rng = random.Random(seed)
    draws = []
    for _ in range(replicates):
        y = [f + u * (1 if rng.random() < 0.5 else -1) for f, u in zip(fitted, scaled, strict=True)]
        h = [sum(r[i] * v for r, v in zip(rows, y, strict=True)) for i in range(k)]
        try:
            draws.append(nnls_normal(g, h, lower, guess=active))
        except SolveError:
            continue
    return covariance(draws, k)


def _zeros(k: int) -> Matrix:
    return [[0.0] * k for _ in range(k)]


def _inflated(residual: Sequence[float], lev: Sequence[float], n: int, p: int) -> list[float]:
    """HC3-like: residuals of high-leverage rows are shrunk by the fit; undo it."""
    if n <= p:
        return list(residual)
    return [u / math.sqrt(1 - h) for u, h in zip(residual, lev, strict=True)]


def covariance(draws: Sequence[Sequence[float]], k: int) -> Matrix:
    """The sample covariance of ``draws`` (zeros for fewer than two)."""
    if len(draws) < 2:
        return _zeros(k)
    mean = [sum(d[i] for d in draws) / len(draws) for i in range(k)]
    m = len(draws) - 1
    return [[sum((d[i] - mean[i]) * (d[j] - mean[j]) for d in draws) / m for j in range(k)] for i in range(k)]


def quadratic(cov: Sequence[Sequence[float]], x: Sequence[float]) -> float:
    """``x' cov x`` (never below 0)."""
    k = len(x)
    return max(0.0, sum(x[i] * cov[i][j] * x[j] for i in range(k) for j in range(k) if x[i] and x[j]))


def transform(cov: Sequence[Sequence[float]], m: Sequence[Sequence[float]]) -> Matrix:
    """The covariance of ``M c`` from that of ``c``: ``M cov M'``."""
    rows, k = len(m), len(cov)
    mc = [[sum(m[a][i] * cov[i][j] for i in range(k)) for j in range(k)] for a in range(rows)]
    return [[sum(mc[a][j] * m[b][j] for j in range(k)) for b in range(rows)] for a in range(rows)]
