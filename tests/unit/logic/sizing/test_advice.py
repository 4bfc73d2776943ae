"""What to set: the deadline, the guard's policy, and the limits that stay under a deadline."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pytest_enginedead.logic.policy import STOCK_DEADLINE_S, Backend
from pytest_enginedead.logic.sizing import advice
from pytest_enginedead.logic.sizing.fit import Fit
from pytest_enginedead.logic.sizing.shapes import Chunk, Limits, StepPlan
from tests.support.sizing import TRUE

# --- the advice ------------------------------------------------------------------------------------


def test_the_recommendation_covers_the_worst_step_with_headroom() -> None:
    f = Fit(TRUE)
    lim = Limits(128, 2048, 4096)
    adv = advice.advise(f, lim, 1024, 3.0, STOCK_DEADLINE_S)
    assert adv.recommended_s >= 3.0 * adv.worst_s and adv.recommended_s >= STOCK_DEADLINE_S
    assert not adv.fits


def test_the_limits_under_the_deadline_are_the_largest_that_fit() -> None:
    f = Fit(TRUE)
    lim = Limits(128, 2048, 512)
    adv = advice.advise(f, lim, 128, 3.0, 300.0)

    def fits(limits: Limits) -> bool:
        return advice.worst_time(f, limits, 128)[1] * 3.0 <= 300.0

    seqs, tokens = adv.max_num_seqs_under_deadline, adv.max_num_batched_tokens_under_deadline
    assert seqs is not None and fits(Limits(seqs, 2048, 512)) and not fits(Limits(seqs + 1, 2048, 512))
    assert tokens is not None and fits(Limits(128, tokens, 512)) and not fits(Limits(128, tokens + 1, 512))
    assert adv.flags == f"--max-num-seqs 128 --max-num-batched-tokens {tokens}"


def test_a_config_that_fits_keeps_its_flags_and_stock_deadline() -> None:
    adv = advice.advise(Fit({"fixed": 0.01, "per_token": 0.0001}), Limits(16, 256, 256), None, 3.0, 300.0)
    assert (
        adv.fits
        and adv.recommended_s == 300
        and adv.flags == "--max-num-seqs 16 --max-num-batched-tokens 256"
    )


def test_the_guard_policy_covers_every_step_of_each_size() -> None:
    """timeout_s(CPU, seqs, tokens) >= headroom x the heaviest step with that many sequences and tokens,
    whatever its context: the per-token term is fitted, not zero."""
    f = Fit(TRUE)
    lim = Limits(64, 1024, 2048)
    policy = advice.advise(f, lim, 512, 3.0, 300.0).policy
    assert policy.rules[Backend.CPU].per_token_s > 0
    rng = random.Random(3)
    for _ in range(300):
        d = rng.randrange(0, 64)
        chunk = rng.randrange(0, 1024 - d)
        if d == 0 and chunk == 0:
            continue
        offset = rng.randrange(0, 2047 - chunk) if chunk else 0
        plan = StepPlan(d, rng.randrange(1, 2048), (Chunk(chunk, offset),) if chunk else ())
        step = plan.step(512)
        assert policy.timeout_s(Backend.CPU, step.seqs, step.tokens) >= 3.0 * f.predict(step) - 1e-9


def test_the_policy_source_rebuilds_the_policy() -> None:
    from pytest_enginedead.logic.policy import TimeoutPolicy

    policy = advice.advise(Fit(TRUE), Limits(64, 1024, 2048), 512, 3.0, 300.0).policy
    space: dict[str, Any] = {"TimeoutPolicy": TimeoutPolicy}
    exec(advice.policy_source(policy), space)
    for n, t in ((1, 1), (64, 1024), (8, 500)):
        assert space["POLICY"].timeout_s("cpu", n, t) == pytest.approx(
            policy.timeout_s("cpu", n, t), rel=1e-5
        )
