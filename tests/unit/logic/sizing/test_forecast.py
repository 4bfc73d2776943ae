"""From depth slices to the full model: one fit over every slice's steps, read at full depth.

Every term is recovered from steps synthesised with known terms (a mixture of experts and a dense
model), so a fit that loses one, or reads it at the wrong depth, fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_enginedead.logic.sizing import forecast, joint, slices
from pytest_enginedead.logic.sizing.fit import Step
from pytest_enginedead.logic.sizing.shapes import Chunk, StepPlan
from pytest_enginedead.logic.sizing.terms import Routing
from tests.support.sizing import COEF, SHAPES, config_26b, priced, slice_steps

HEAVY = Path(__file__).resolve().parents[4] / "fixtures" / "heavy-llama" / "config.json"


def sliced(cfg: dict[str, object], depths: tuple[int, ...], coef: dict[str, float]
           ) -> list[tuple[slices.Layout, list[tuple[Step, float]]]]:
    full = slices.layout(cfg)
    lays = [slices.slice_layout(full, k) for k in depths]
    return [(lay, slice_steps(lay, coef, cfg)) for lay in lays]


def test_two_slices_of_a_mixture_of_experts_give_back_every_coefficient() -> None:
    """The 26B's slices 1 and 2, timed by known coefficients (the experts a step reaches among them): the
    fit gives each back, and the full depth predicts what the same coefficients say of it."""
    cfg = config_26b()
    full = slices.layout(cfg)
    fc = forecast.fit_slices(sliced(cfg, (1, 2), COEF), full, cfg)
    assert not fc.tied
    for term, value in COEF.items():
        assert fc.coefficients[term] == pytest.approx(value, rel=1e-6), term
    for shape, seconds in slice_steps(full, COEF, cfg):
        assert fc.fit.predict(shape) == pytest.approx(seconds, rel=1e-6)
    assert fc.fit.routing == Routing(128, 8, 30)
    assert fc.fit.terms["per_expert"] == pytest.approx(COEF["layer_expert"])
    per_layer = fc.per_layer()
    assert per_layer["full_attention"].per_token_s > per_layer["sliding_attention"].per_token_s  # wider heads


def test_a_dense_model_has_no_expert_term_and_gives_back_the_rest() -> None:
    """Heavy Llama (12 dense layers): slices 1 and 4, no expert term anywhere, every other term back."""
    cfg = json.loads(HEAVY.read_text())
    full = slices.layout(cfg)
    dense = {**COEF, "layer_expert": 0.0, "window_context": 0.0}
    fc = forecast.fit_slices(sliced(cfg, (1, 4), dense), full, cfg)
    assert fc.fit.routing is None and "per_expert" not in fc.fit.terms
    for term in ("fixed", "per_seq", "per_token", "layer_fixed", "layer_per_token", "full_context", "read"):
        assert fc.coefficients[term] == pytest.approx(dense[term], rel=1e-6), term
    assert fc.fit.terms["per_token"] == pytest.approx(COEF["per_token"] + 12 * COEF["layer_per_token"])


def test_without_the_expert_term_the_decodes_bend_away_from_the_fit() -> None:
    """Steps that pay per expert reached: a model with no such term under-forecasts a decode of 8 (where
    experts are reached fastest) and over-forecasts a decode of 1 -- the sign of the miss changes with the
    batch, as the issue's forecast did.  With the term, no miss."""
    cfg = config_26b()
    full = slices.layout(cfg)
    heavy = {**COEF, "layer_expert": 0.02}
    parts = sliced(cfg, (1, 2), heavy)
    fc = forecast.fit_slices(parts, full, cfg)
    model = joint.JointModel.of(cfg, full)
    truth = {n: priced(model, heavy, Step(n, n, 3 * n, 3 * n), full) for n in (1, 8, 128)}
    for n, seconds in truth.items():
        assert fc.fit.predict(Step(n, n, 3 * n, 3 * n)) == pytest.approx(seconds, rel=1e-6)
    flat = {**cfg, "num_experts": None, "enable_moe_block": False}  # the same steps, no routing known
    line = forecast.fit_slices(parts, full, flat)
    misses = {n: line.fit.predict(Step(n, n, 3 * n, 3 * n)) / s - 1 for n, s in truth.items()}
    assert misses[8] < -0.02 < 0.02 < misses[1], misses


def test_contexts_that_cannot_tell_the_layer_types_apart_tie_them() -> None:
    cfg = config_26b()
    full = slices.layout(cfg)
    short = [Step(n, n, n * 100, n * 100) for n in (1, 8, 32)] + [Step(1, 512, 131_328, 131_328)]
    tied = joint.JointModel.of(cfg, full, tied=True)
    lays = [slices.slice_layout(full, k) for k in (1, 2)]
    parts = [(lay, [(s, priced(tied, COEF, s, lay)) for s in short]) for lay in lays]
    fc = forecast.fit_slices(parts, full, cfg)
    assert fc.tied and fc.fit.terms["per_context_token"] > 0 and fc.fit.terms["per_window_context_token"] > 0


#: steps whose every query sees the 26B's whole window (1024 keys): decodes past it, chunks after it
PAST_WINDOW = [p.step(1024) for p in (
    *(StepPlan(n, 2000) for n in (1, 8, 32, 128)), *(StepPlan(8, c) for c in (4096, 16384)),
    StepPlan(0, 0, (Chunk(2048, 4096),)), StepPlan(1, 3000, (Chunk(512, 2000),)), StepPlan(4, 6000),
)]
#: steps inside the window: the only ones whose windowed keys are not a multiple of their tokens
INSIDE_WINDOW = [p.step(1024) for p in (
    *(StepPlan(n, c) for n in (1, 8, 32) for c in (100, 500, 1000)), StepPlan(0, 0, (Chunk(1000, 0),)),
)]


def own_steps(shapes: list[Step], coef: dict[str, float], noise: float
              ) -> list[tuple[slices.Layout, list[tuple[Step, float]]]]:
    """The full model's own steps, each ``noise`` slow or fast in turn."""
    cfg = config_26b()
    full = slices.layout(cfg)
    steps = slice_steps(full, coef, cfg, shapes=shapes)
    return [(full, [(s, t * (1 + noise * (-1) ** i)) for i, (s, t) in enumerate(steps)])]


def test_a_window_term_no_step_tells_apart_is_tied_to_its_twin() -> None:
    """Past the window a sliding layer's keys are the window times the tokens: the other terms make
    that column exactly, so even noiseless steps leave the window term to the solver's whim (it read
    2.6e-7 for a true 2e-6).  Tied, it is the full term's cost per key, not a guess."""
    cfg = config_26b()
    fc = forecast.fit_slices(own_steps(PAST_WINDOW, COEF, 0.0), slices.layout(cfg), cfg)
    assert fc.tied
    assert fc.fit.terms["per_window_context_token"] > 0


def test_a_tie_keeps_the_untied_reading_in_its_interval() -> None:
    """The fit ties the terms because the steps cannot choose between the two readings: they agree past
    the window and part inside it, where the interval holds half their distance beside what the
    bootstrap gives the reading it kept (nothing here: the steps are noiseless)."""
    cfg = config_26b()
    fc = forecast.fit_slices(own_steps(PAST_WINDOW, COEF, 0.0), slices.layout(cfg), cfg)
    assert fc.tied and fc.untied and fc.untied != fc.fit.terms
    for plan, parted in ((StepPlan(8, 16384), False), (StepPlan(128, 100), True)):
        x = fc.fit.features(plan.step(1024))
        readings = [sum(t[n] * v for n, v in zip(fc.fit.uncertainty.terms, x, strict=True))
                    for t in (fc.fit.terms, fc.untied)]
        assert (readings[0] != pytest.approx(readings[1], rel=0.01)) is parted
        assert fc.fit.uncertainty.sd(x, readings[0]) >= abs(readings[1] - readings[0]) / 2 * 0.999


def test_widening_adds_half_the_distance_to_the_other_reading_and_nothing_without_one() -> None:
    from pytest_enginedead.logic.sizing.fit import Uncertainty

    u = Uncertainty(("fixed", "per_seq"), ((0.0, 0.0), (0.0, 0.0)))
    assert u.widened({}) is u
    wide = u.widened({"per_seq": 0.2})
    assert wide.sd([1.0, 8.0], 1.0) == pytest.approx(0.8)  # 8 sequences x 0.1 s per sequence
    assert wide.sd([1.0, 0.0], 1.0) == 0.0  # a step without that term's work is as sure as before


@pytest.mark.parametrize(("window_s", "tied"), [(2e-5, False), (2e-6, True)])
def test_steps_inside_the_window_resolve_its_term_only_above_their_noise(window_s: float, tied: bool) -> None:
    """The same steps, 3 % slow or fast in turn: a window term that costs 2e-5 s per key stands out of
    that noise and is measured (within 20 %); one ten times cheaper does not, and is tied rather than
    read off the noise (a repeat of one calibration moved such a term 224x)."""
    cfg = config_26b()
    steps = own_steps(INSIDE_WINDOW + PAST_WINDOW, {**COEF, "window_context": window_s}, 0.03)
    fc = forecast.fit_slices(steps, slices.layout(cfg), cfg)
    assert fc.tied is tied
    assert bool(fc.untied) is tied
    if not tied:
        assert fc.coefficients["window_context"] == pytest.approx(window_s, rel=0.2)


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
    shown = fc.fit.worst
    assert shown is not None
    assert shown.measured_on == f"a slice of {slices.slice_layout(full, 1).describe()}"
    assert shown.step == SHAPES[0]
    assert shown.relative == pytest.approx(fc.fit.worst_residual)
    assert fc.fit.predict(shown.step) > 2 * shown.predicted_s  # the full depth's prediction is another step's
