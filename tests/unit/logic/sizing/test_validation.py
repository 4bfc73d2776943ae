"""The validation set and its figures, without engines: what is held out, and what the figures say."""

from __future__ import annotations

import pytest

from pytest_enginedead.logic.sizing import validation
from pytest_enginedead.logic.sizing.fit import Fit, Uncertainty
from pytest_enginedead.logic.sizing.runs import DECODE_BATCHES, fit_runs
from pytest_enginedead.logic.sizing.shapes import Chunk, Limits, StepPlan
from pytest_enginedead.logic.sizing.terms import Step


def test_the_held_out_runs_are_steps_the_fit_never_measures() -> None:
    """No held-out decode batch is one the fit measures; the set reaches batch 128, a full chunk, 16K keys
    and the worst step's shape at short and long context."""
    held = validation.held_out_runs(128, 2048, 16384, 4)
    fitted = {r.name for r in fit_runs(Limits(128, 2048, 16640), None, DECODE_BATCHES, 4)}
    assert not fitted & {r.name for r in held}
    decodes = [len(r.waves[0].prompts) for r in held if r.name.startswith("decode batch")]
    assert decodes == list(validation.HELD_OUT_BATCHES) and max(decodes) == 128
    assert any(r.name == "a prompt of 2048 tokens" for r in held)
    assert max(w.shared for r in held for w in r.waves) == 16384
    worst = [r for r in held if "beside" in r.name]
    assert len(worst) == 2 and all(len(r.waves) == 2 for r in worst)
    assert validation.held_out_runs(8, 256, 512, 4)[-1].name.startswith("7 decodes at 385 tokens")


@pytest.mark.parametrize(("plan", "kind"), [
    (StepPlan(64, 3), "decode"),
    (StepPlan(16, 8192), "long decode"),
    (StepPlan(0, 0, (Chunk(512, 0),)), "prefill"),
    (StepPlan(0, 0, (Chunk(256, 0, 4),)), "prefill"),
    (StepPlan(0, 0, (Chunk(1024, 12288),)), "long prefill"),
    (StepPlan(31, 385, (Chunk(256, 256),)), "worst"),
    (StepPlan(15, 16384, (Chunk(512, 15872),)), "worst"),
    (StepPlan(15, 16385), "long decode"),  # the 1-token prefill of prompts that go on past a cached prefix
], ids=["decode", "long-decode", "prompt", "prompts", "long-chunk", "worst-short", "worst-long", "one-token"])
def test_each_step_is_of_its_kind(plan: StepPlan, kind: str) -> None:
    assert validation.kind_of(plan.step(128)) == kind


def test_like_steps_of_a_run_are_one_check() -> None:
    """A decode batch's steps at contexts 3 to 9 (short: the batch, not attention) are one check, its
    median; at long context, steps within a quarter of each other's keys pool, farther ones do not."""
    fit = Fit({"per_token": 1.0})
    short = [(Step(2, 2, c), t) for c, t in ((3, 1.0), (5, 3.0), (7, 2.0), (9, 9.0))]
    (one,) = validation.checks(fit, [short])
    assert one.steps == 4 and one.measured_s == 2.5 and one.step.context_tokens == 6
    long = [(Step(4, 4, 4 * c), 1.0) for c in (8192, 8200, 16384, 16390)]
    assert [c.steps for c in validation.checks(fit, [long[:3]])] == [2]  # 16384 alone: a transition
    assert [c.steps for c in validation.checks(fit, [long])] == [2, 2]
    chunk = (Step(1, 2048, 2048 * 9000), 1.0)
    assert [c.steps for c in validation.checks(fit, [[chunk]])] == [1]  # a chunk: one by design
    assert len(validation.checks(fit, [short, short])) == 2  # runs apart


def test_the_figures_of_known_errors() -> None:
    """Forecasts +10 %, -20 % and +5 % of what was measured: MAPE 11.7 %, mean signed -1.7 %, the worst
    -20 %, the most short -20 %; two of three inside their intervals."""
    fit = Fit({"per_token": 1.0}, uncertainty=Uncertainty(("per_token",), ((0.0,),), misfit=0.06))
    steps = [(Step(1, 1, 0), 1 / 1.10), (Step(2, 2, 0), 2 / 0.80), (Step(4, 4, 0), 4 / 1.05)] * 2
    found = validation.checks(fit, [steps])
    assert [round(c.error, 6) for c in found] == [0.10, -0.20, 0.05]
    assert [c.inside for c in found] == [True, False, True]  # +- 1.645 x 6 %: 9.9 % of the forecast
    s = validation.summary(found)
    assert s.checks == 3 and found[0].steps == 2
    assert s.mape == pytest.approx(0.35 / 3) and s.mean_signed == pytest.approx(-0.05 / 3)
    assert s.worst == pytest.approx(-0.20) and s.most_short == pytest.approx(-0.20)
    assert s.coverage == pytest.approx(2 / 3) and s.level == 0.90
    assert validation.summary([c for c in found if c.error > 0]).most_short == 0.0
