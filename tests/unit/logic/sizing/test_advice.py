"""What to set: the deadline, the guard's policy, and the limits that stay under a deadline."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pytest_enginedead.logic.sizing import advice
from pytest_enginedead.logic.sizing.fit import Fit
from pytest_enginedead.logic.sizing.shapes import Chunk, Limits, StepPlan
from pytest_enginedead.logic.sizing.text import advice_lines
from pytest_enginedead.logic.timeouts.policies import STOCK_DEADLINE_S, Backend
from tests.support.sizing import TRUE, answer_of

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
    from pytest_enginedead.logic.timeouts.policies import TimeoutPolicy

    policy = advice.advise(Fit(TRUE), Limits(64, 1024, 2048), 512, 3.0, 300.0).policy
    space: dict[str, Any] = {"TimeoutPolicy": TimeoutPolicy}
    exec(advice.policy_source(policy), space)
    for n, t in ((1, 1), (64, 1024), (8, 500)):
        assert space["POLICY"].timeout_s("cpu", n, t) == pytest.approx(
            policy.timeout_s("cpu", n, t), rel=1e-5
        )


# --- the limits table: common serving values, never a context under 2048 (or the model's) ---------

#: the reported model's context, and the shrunk MoE's
LONG, SHORT = 262144, 512


def lines_of(adv: advice.Advice, lim: Limits, fit: Fit) -> list[str]:
    """What calibrate prints of this advice (``text.advice_lines``, from the typed answer)."""
    return advice_lines(answer_of(adv, lim, fit))


@pytest.mark.parametrize(
    ("asked", "model_len", "contexts"),
    [
        (LONG, LONG, list(advice.COMMON_CONTEXTS)),
        (8192, LONG, list(advice.COMMON_CONTEXTS)),
        (1024, LONG, list(advice.COMMON_CONTEXTS)),  # 1024 asked: under 2048, not advised
        (6000, LONG, sorted({*advice.COMMON_CONTEXTS, 6000})),
        (SHORT, SHORT, [SHORT]),  # the model's own, under 2048
        (256, SHORT, [SHORT]),
    ],
    ids=["model-context", "8k", "1k-asked", "6000-asked", "short-model", "short-model-256-asked"],
)
def test_the_table_never_advises_a_context_under_2048_or_the_models_own(
    asked: int, model_len: int, contexts: list[int]
) -> None:
    lim = Limits(128, 2048, asked)
    rows = advice.limits_table(Fit(TRUE), lim, 1024, 3.0, 300.0, model_len)
    assert [r.max_model_len for r in rows] == contexts
    assert all(r.max_model_len >= min(advice.MIN_CONTEXT, model_len) for r in rows)


def test_each_row_is_the_most_sequences_of_the_common_values_that_fit() -> None:
    fit, lim = Fit(TRUE), Limits(128, 2048, 32768)
    rows = advice.limits_table(fit, lim, 1024, 3.0, 300.0, LONG)
    fitting = [r for r in rows if r.flags()]
    assert fitting and any(r.flags() is None for r in rows)  # short contexts fit, the longest do not

    def worst(seqs: int, tokens: int, ctx: int) -> float:
        return advice.worst_time(fit, Limits(seqs, tokens, ctx), 1024)[1]

    for r in fitting:
        assert r.max_num_seqs in advice.COMMON_SEQS and r.max_num_batched_tokens in advice.COMMON_TOKENS
        assert r.max_num_batched_tokens is not None and r.max_num_seqs is not None
        assert r.worst_s == worst(r.max_num_seqs, r.max_num_batched_tokens, r.max_model_len)
        assert r.worst_s is not None and r.worst_s * 3.0 <= 300.0
        more = [s for s in advice.COMMON_SEQS if s > r.max_num_seqs]
        larger = [(s, t) for s in more for t in advice.COMMON_TOKENS if t >= s]
        assert all(worst(s, t, r.max_model_len) * 3.0 > 300.0 for s, t in larger)
        assert r.flags() == (f"--max-model-len {r.max_model_len} --max-num-seqs {r.max_num_seqs} "
                             f"--max-num-batched-tokens {r.max_num_batched_tokens}")
    # longer contexts never allow more
    seqs = [r.max_num_seqs or 0 for r in rows]
    assert seqs == sorted(seqs, reverse=True)


def test_no_limits_fit_says_so_and_points_to_the_deadline_or_the_guard() -> None:
    """A step that takes 150 s whatever it holds: no common limits stay under 300 s with headroom 3."""
    lim = Limits(128, 2048, LONG)
    fit = Fit({"fixed": 150.0})
    adv = advice.advise(fit, lim, 1024, 3.0, 300.0, LONG)
    assert adv.table and all(r.flags() is None and r.max_num_seqs is None for r in adv.table)
    lines = lines_of(adv, lim, fit)
    assert ("  3. smaller limits: no such limits at --max-model-len 2048 to 262144 (1-256 sequences): raise "
            "the deadline (1) or run the guard (2)") in lines
    assert not any(ln.startswith("  3. keep the deadline, serve smaller limits") for ln in lines)
    assert adv.as_dict()["limits_table"][0]["flags"] is None


def test_limits_that_fit_are_listed_with_their_worst_step() -> None:
    lim = Limits(128, 2048, 32768)
    adv = advice.advise(Fit(TRUE), lim, 1024, 3.0, 300.0, LONG)
    lines = lines_of(adv, lim, Fit(TRUE))
    head = lines.index("  3. keep the deadline, serve smaller limits (common values whose worst step x 3 "
                       "stays under 300 s):")
    listed = [ln for ln in lines[head + 1:] if ln.startswith("       --max-model-len ")]
    assert len(listed) == len([r for r in adv.table if r.flags()]) > 0
    assert all(" (worst step " in ln for ln in listed)
    assert all(int(ln.split()[1]) >= 2048 for ln in listed)
    assert any(ln.startswith("     (none at --max-model-len ") for ln in lines)


# --- the guard's default cap against the worst step ----------------------------------------------


@pytest.mark.parametrize(("fixed", "warned"), [(50.0, False), (1000.0, False), (5000.0, True)],
                         ids=["fits-the-deadline", "under-the-reference-cap", "over-the-reference-cap"])
def test_the_reference_cap_warning_appears_exactly_when_the_cap_is_below_the_worst_step(
    fixed: float, warned: bool
) -> None:
    """The guard's default policy caps a step of 128 sequences and 2048 tokens at ~1921 s: a worst
    step of 1000 s is covered, one of 5000 s is not (the guard would end it as vLLM does)."""
    lim = Limits(128, 2048, 4096)
    fit = Fit({"fixed": fixed, "per_seq": 0.001})
    adv = advice.advise(fit, lim, None, 3.0, 300.0, 4096)
    assert adv.reference_cap_s is not None
    assert (adv.reference_cap_s < adv.worst_s) is warned
    assert adv.as_dict()["reference_cap_covers_worst"] is (not warned)
    lines = lines_of(adv, lim, fit)
    said = [ln for ln in lines if "the guard's default, the reference policy, caps this step at" in ln]
    assert len(said) == int(warned)
    if warned:
        assert said[0].endswith("it would end that step as vLLM does)")
    if fixed * 3.0 <= 300.0:
        assert lines[-1] == "what to set: nothing; these limits stay under the deadline in force."
