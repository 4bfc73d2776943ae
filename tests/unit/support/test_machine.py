"""The engine tests' sizing (``tests/support/machine.py``): pure maths over measured steps, no vLLM."""

from __future__ import annotations

import pytest

from tests.support.machine import DIE, LIVE, StepCost, death_sizes


def cost(a: float, b: float) -> StepCost:
    rows = [{"batch_size": n, "p50_s": a + b * n} for n in (8, 32, 64)]
    return StepCost.fit("m", rows)


def test_the_fit_recovers_a_line() -> None:
    c = cost(0.1, 0.0125)
    assert c.a_s == pytest.approx(0.1) and c.b_s == pytest.approx(0.0125)
    assert c.predict(100) == pytest.approx(1.35)


def test_the_fit_refuses_what_cannot_size_a_test() -> None:
    with pytest.raises(ValueError, match="two batch sizes"):
        StepCost.fit("m", [{"batch_size": 8, "p50_s": 0.2}])
    with pytest.raises(ValueError, match="does not grow with the batch"):
        StepCost.fit("m", [{"batch_size": 8, "p50_s": 0.2}, {"batch_size": 64, "p50_s": 0.2}])


@pytest.mark.parametrize(
    "speed", [0.5, 1.0, 2.0, 4.0], ids=["2x-slower", "this-box", "2x-faster", "4x-faster"]
)
def test_sizes_keep_their_margins_on_any_machine(speed: float) -> None:
    """The same model on machines from twice as slow to four times as fast: the living
    step stays within half the deadline, the dying one at 2.5 deadlines or more."""
    c = cost(0.09 / speed, 0.0126 / speed)  # the shrunk Gemma-4 on the 2-core box, scaled
    sizes = death_sizes(c, most=1024)
    assert not isinstance(sizes, str), sizes
    assert c.predict(sizes.living) <= LIVE * sizes.deadline_s
    assert c.predict(sizes.dying) >= DIE * sizes.deadline_s
    assert c.predict(sizes.dying - 1) < DIE * sizes.deadline_s  # the smallest such batch
    assert sizes.deadline_s == 1 and sizes.living == 8
    assert "batch 8 lives" in sizes.describe() and f"batch {sizes.dying} dies" in sizes.describe()


def test_a_slow_machine_gets_a_longer_deadline_not_a_false_failure() -> None:
    """Batch 8 of 4-token prompts takes 0.9 s: a 1 s deadline would not leave half of it."""
    c = cost(0.1, 0.025)
    sizes = death_sizes(c, most=1024, living=(8,), tokens_per_seq=4)
    assert not isinstance(sizes, str)
    assert sizes.deadline_s == 2 and c.predict(32) <= LIVE * 2 < c.predict(32) * 2
    assert c.predict(sizes.dying) >= DIE * 2


def test_a_machine_too_fast_for_the_model_skips_with_a_reason() -> None:
    c = cost(0.01, 0.001)
    reason = death_sizes(c, most=512)
    assert isinstance(reason, str)
    assert reason.startswith("this machine is too fast for the test: no batch up to 512 takes 2.5 x")
    assert "batch 512 is predicted 0.52 s" in reason


def test_flat_steps_are_their_own_error_naming_the_points() -> None:
    """A fast box's steps drowned in a neighbour's noise: the engine fixture measures again
    and then skips on this error (tests/engine/conftest.py), so it must be told apart."""
    from tests.support.machine import FlatSteps

    rows = [{"batch_size": n, "p50_s": s} for n, s in ((2, 0.0787), (16, 0.0490), (32, 0.0646))]
    with pytest.raises(FlatSteps, match=r"does not grow with the batch on m \(p50 at batch 2: 0.0787 s"):
        StepCost.fit("m", rows)
