"""Non-negative least squares with floors, and the bootstrap covariance behind every interval."""

from __future__ import annotations

import itertools
import random

import pytest

from pytest_enginedead.logic.sizing import solve


def brute(rows: list[list[float]], y: list[float], lower: list[float]) -> list[float]:
    """The same optimum by enumerating every active set on the rows themselves."""
    k = len(rows[0])
    best = None
    for size in range(k + 1):
        for subset in itertools.combinations(range(k), size):
            shifted = [yi - sum(r[j] * lower[j] for j in range(k)) for r, yi in zip(rows, y, strict=True)]
            g, h = solve.normal_equations([[r[j] for j in subset] for r in rows], shifted)
            sol = solve._solve(g, h) if subset else []
            if sol is None or any(v < 0 for v in sol):
                continue
            c = list(lower)
            for j, v in zip(subset, sol, strict=True):
                c[j] += v
            fitted = [sum(a * b for a, b in zip(r, c, strict=True)) for r in rows]
            sse = sum((f - yi) ** 2 for f, yi in zip(fitted, y, strict=True))
            if best is None or sse < best[0] - 1e-12:
                best = (sse, c)
    assert best is not None
    return best[1]


@pytest.mark.parametrize("seed", range(6))
def test_the_optimum_respects_the_floors_and_is_the_brute_forces(seed: int) -> None:
    rng = random.Random(seed)
    rows = [[rng.uniform(0, 2) for _ in range(4)] for _ in range(12)]
    y = [rng.uniform(-1, 3) for _ in rows]
    lower = [0.0, 0.2, 0.0, 0.5]
    got = solve.nnls(rows, y, lower)
    assert all(c >= low - 1e-12 for c, low in zip(got, lower, strict=True))
    assert got == pytest.approx(brute(rows, y, lower), abs=1e-9)


def test_a_floor_that_does_not_bind_changes_nothing() -> None:
    rows = [[1.0, x] for x in (1.0, 2.0, 3.0, 4.0)]
    y = [1 + 2 * x for x in (1.0, 2.0, 3.0, 4.0)]
    assert solve.nnls(rows, y) == pytest.approx([1.0, 2.0])
    assert solve.nnls(rows, y, [0.5, 1.0]) == pytest.approx([1.0, 2.0])
    assert solve.nnls(rows, y, [0.0, 2.5])[1] == pytest.approx(2.5)  # held at its floor


def test_the_guess_gives_the_same_optimum_as_the_enumeration() -> None:
    rng = random.Random(3)
    rows = [[1.0, rng.uniform(0, 5), rng.uniform(0, 5)] for _ in range(10)]
    y = [0.5 + 0.3 * r[1] + rng.uniform(-0.1, 0.1) for r in rows]
    g, h = solve.normal_equations(rows, y)
    full = solve.nnls_normal(g, h)
    for guess in ([0, 1], [0, 1, 2], [2], []):
        assert solve.nnls_normal(g, h, guess=guess) == pytest.approx(full, abs=1e-9)


def test_exact_steps_have_no_uncertainty_and_noisy_ones_grow_away_from_the_data() -> None:
    """Relative rows (target 1): exact data, a zero covariance; noisy data, a prediction far from the
    measured range more uncertain than one inside it."""
    xs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    truth = [0.5, 0.25]
    exact = [[1 / (0.5 + 0.25 * x), x / (0.5 + 0.25 * x)] for x in xs]
    coef = solve.nnls(exact, [1.0] * len(xs))
    cov = solve.bootstrap_covariance(exact, coef)
    assert coef == pytest.approx(truth) and solve.quadratic(cov, [1.0, 100.0]) == pytest.approx(0, abs=1e-18)
    rng = random.Random(1)
    times = [(0.5 + 0.25 * x) * (1 + rng.uniform(-0.1, 0.1)) for x in xs]
    noisy = [[1 / t, x / t] for x, t in zip(xs, times, strict=True)]
    coef = solve.nnls(noisy, [1.0] * len(xs))
    cov = solve.bootstrap_covariance(noisy, coef)
    inside = solve.quadratic(cov, [1.0, 3.5]) ** 0.5 / (coef[0] + 3.5 * coef[1])
    far = solve.quadratic(cov, [1.0, 100.0]) ** 0.5 / (coef[0] + 100 * coef[1])
    assert 0 < inside < far
    assert solve.bootstrap_covariance(noisy, coef) == cov  # seeded: the same steps, the same interval


def test_a_covariance_carries_through_a_linear_map() -> None:
    cov = [[4.0, 1.0], [1.0, 9.0]]
    assert solve.transform(cov, [[1.0, 1.0]]) == [[15.0]]
    assert solve.transform(cov, [[2.0, 0.0], [0.0, 1.0]]) == [[16.0, 2.0], [2.0, 9.0]]
