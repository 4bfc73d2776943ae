"""From depth slices to the full model: one fit over every slice's steps, read at full depth."""

from __future__ import annotations

import pytest

from pytest_enginedead.logic.sizing import forecast, slices
from pytest_enginedead.logic.sizing.fit import Step
from tests.support.sizing import COEF, config_26b, slice_steps


def test_two_slices_forecast_the_full_depth_exactly_when_the_costs_are_per_layer() -> None:
    cfg = config_26b()
    full = slices.layout(cfg)
    parts = [
        (slices.slice_layout(full, k), slice_steps(slices.slice_layout(full, k), COEF, cfg)) for k in (1, 2)
    ]
    fc = forecast.fit_slices(parts, full, cfg)
    assert not fc.tied
    truth = slice_steps(full, COEF, cfg)
    for shape, seconds in truth:
        assert fc.fit.predict(shape) == pytest.approx(seconds, rel=1e-6)
    per_layer = fc.per_layer(full)
    assert (
        per_layer["full_attention"]["per_token_s"] > per_layer["sliding_attention"]["per_token_s"]
    )  # wider heads
    assert fc.as_dict(full)["depth_independent"]["per_seq_s"] == pytest.approx(0.15)


def test_contexts_that_cannot_tell_the_layer_types_apart_tie_them() -> None:
    cfg = config_26b()
    full = slices.layout(cfg)
    short = [Step(n, n, n * 100, n * 100) for n in (1, 8, 32)] + [Step(1, 512, 131_328, 131_328)]
    weights = forecast.layer_weights(cfg, full)
    parts = []
    for k in (1, 2):
        lay = slices.slice_layout(full, k)
        rows = [
            (
                s,
                sum(
                    c * x
                    for c, x in zip(COEF.values(), forecast._features(s, lay, weights, True), strict=True)
                ),
            )
            for s in short
        ]
        parts.append((lay, rows))
    fc = forecast.fit_slices(parts, full, cfg)
    assert fc.tied and fc.fit.terms["per_context_token"] > 0 and fc.fit.terms["per_window_context_token"] > 0


def test_the_worst_residual_is_shown_where_it_was_measured() -> None:
    """A forecast's worst-fitting group was measured on a slice: its prediction is the slice's, not the
    full model's (which would read as a miss of the full depth's size), and the slice is named."""
    cfg = config_26b()
    full = slices.layout(cfg)
    parts = []
    for k in (1, 2):
        lay = slices.slice_layout(full, k)
        steps = slice_steps(lay, COEF, cfg)
        if k == 1:  # one group 40 % slow on slice 1: the worst residual
            shape, seconds = steps[0]
            steps = [(shape, seconds * 1.4), *steps[1:]]
        parts.append((lay, steps))
    fc = forecast.fit_slices(parts, full, cfg)
    shown = fc.fit.as_dict()["worst_residual_step"]
    assert isinstance(shown, dict)
    assert shown["measured_on"] == f"a slice of {slices.slice_layout(full, 1).describe()}"
    measured, predicted = shown["measured_s"], shown["predicted_s"]
    assert abs(predicted - measured) / measured == pytest.approx(fc.fit.worst_residual)
    assert fc.fit.predict(fc.fit.worst_step) > 2 * predicted  # the full depth's prediction is another step's
