"""The step cost model without vLLM: one step's time as a sum of terms, fitted on measured steps.

(The same on real engines: ``tests/engine/test_serving_sizes.py``; figures from real runs:
``bench/sizing.py``.)
"""

from __future__ import annotations

import random

import pytest

from pytest_enginedead.logic.sizing import fit
from pytest_enginedead.logic.sizing.fit import Fit, Step
from tests.support.sizing import SHAPES, TRUE


def synthetic(
    terms: dict[str, float], shapes_: list[Step], noise: float = 0.0, seed: int = 1
) -> list[tuple[Step, float]]:
    rng = random.Random(seed)
    truth = Fit(terms)
    return [(s, truth.predict(s) * (1 + rng.uniform(-noise, noise))) for s in shapes_]


# --- the step model ----------------------------------------------------------------------------------


def test_the_fit_recovers_the_terms_that_made_the_steps() -> None:
    fitted = fit.fit_steps(synthetic(TRUE, SHAPES), fit.TERMS)
    for term, value in TRUE.items():
        assert fitted.terms[term] == pytest.approx(value, rel=1e-6), term
    assert fitted.worst_residual < 1e-9


def test_the_fit_never_goes_negative_and_weighs_relative_error() -> None:
    """A cost that truly falls with batch cannot be fitted below zero; a 20 ms step counts as much
    as a 20 s one (a deadline is wrong by a ratio)."""
    falling = [(Step(n, n, 0, 0), 1.0 / n) for n in (1, 2, 4, 8)]
    fitted = fit.fit_steps(falling, ("fixed", "per_seq"))
    assert all(v >= 0 for v in fitted.terms.values())
    small_and_large = [(Step(1, 1, 0, 0), 0.02), (Step(1000, 1000, 0, 0), 20.0), (Step(10, 10, 0, 0), 0.2)]
    fitted = fit.fit_steps(small_and_large, ("fixed", "per_seq"))
    for shape, seconds in small_and_large:
        assert fitted.predict(shape) == pytest.approx(seconds, rel=0.05)


def test_like_steps_are_pooled_and_the_worst_residual_names_its_step() -> None:
    noisy = [(Step(8, 8, 24, 24), t) for t in (1.0, 1.1, 0.9, 5.0, 1.0)] + [(Step(1, 1, 3, 3), 0.3)] * 3
    groups = fit.group_steps(noisy)
    assert [(g.seqs, seconds, n) for g, seconds, n in groups] == [(1, 0.3, 3), (8, 1.0, 5)]  # medians
    fitted = fit.fit_steps([*noisy, (Step(32, 32, 96, 96), 9.0)], ("fixed", "per_seq"))
    assert fitted.worst is not None
    residual = abs(fitted.predict(fitted.worst.step) - fitted.worst.measured_s) / fitted.worst.measured_s
    assert residual == pytest.approx(fitted.worst_residual)
    assert fitted.worst.measured_s == 9.0  # the group the two terms cannot follow
    assert set(fitted.terms) == {"fixed", "per_seq"}


def test_no_steps_is_a_fit_error() -> None:
    with pytest.raises(fit.FitError, match="no finished step"):
        fit.fit_steps([(Step(1, 1, 1), 0.0)], ("fixed",))
