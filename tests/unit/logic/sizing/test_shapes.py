"""Which steps a serving configuration can form: the worst-step bound, the plan that forms it, the limits."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from pytest_enginedead.logic.sizing import runs, shapes
from pytest_enginedead.logic.sizing.fit import Fit
from pytest_enginedead.logic.sizing.shapes import Chunk, Limits, StepPlan
from tests.support.sizing import TRUE, config_26b

# --- the worst step -------------------------------------------------------------------------------


def cost(terms: dict[str, float]) -> Any:
    return Fit(terms).predict


def brute_force(lim: Limits, window: int | None, price: Any) -> float:
    """Every composition the scheduler model allows (small limits): decodes at the longest context,
    at most one chunk after computed tokens, new prompts from zero."""
    top = lim.max_model_len - 1
    best = 0.0
    for d in range(0, lim.max_num_seqs + 1):
        for c1 in range(0, top + 1):
            for m in range(0, lim.max_num_seqs - d - (1 if c1 else 0) + 1):
                for sizes in itertools.product(range(1, top + 1), repeat=m):
                    if d + c1 + sum(sizes) > lim.max_num_batched_tokens or d + (c1 > 0) + m == 0:
                        continue
                    chunks = ((Chunk(c1, top - c1),) if c1 else ()) + tuple(Chunk(s, 0) for s in sizes)
                    best = max(best, price(StepPlan(d, top, chunks).step(window)))
    return best


@pytest.mark.parametrize(
    "terms",
    [TRUE, {"fixed": 1.0, "per_seq": 5.0}, {"per_token": 1.0}, {"per_token": 0.1, "per_context_token": 1.0}],
)
@pytest.mark.parametrize(("seqs", "tokens", "length"), [(1, 4, 5), (2, 6, 4), (3, 7, 6), (4, 9, 3)])
def test_the_bound_is_the_heaviest_step_the_scheduler_allows(
    terms: dict[str, float], seqs: int, tokens: int, length: int
) -> None:
    lim = Limits(seqs, tokens, length)
    price = cost(terms)
    plan = shapes.worst_step(lim, 2, price)
    step = plan.step(2)
    assert step.seqs <= seqs and step.tokens <= tokens
    assert price(step) == pytest.approx(brute_force(lim, 2, price))


def test_the_reports_shape_all_decoding_at_max_context_with_the_rest_as_one_chunk() -> None:
    """128 sequences, 2048 tokens, 8K context: 127 decodes at 8191 keys and a 1921-token chunk that
    ends at the longest context."""
    plan = shapes.worst_step(Limits(128, 2048, 8192), 1024, cost(TRUE))
    assert (plan.decodes, plan.decode_context) == (127, 8191)
    assert plan.chunks == (Chunk(1921, 8191 - 1921),)
    assert plan.step(1024).seqs == 128 and plan.step(1024).tokens == 2048


def test_a_short_model_fills_the_budget_with_whole_prompts() -> None:
    """max_model_len 512 < the budget left: the chunk is a whole prompt and new prompts take the rest."""
    plan = shapes.worst_step(Limits(128, 2048, 512), 128, cost(TRUE))
    step = plan.step(128)
    assert step.tokens == 2048 and step.seqs == 128
    assert all(c.tokens <= 511 for c in plan.chunks)


def test_the_kv_cache_shortens_the_decodes_first() -> None:
    free = shapes.worst_step(Limits(128, 2048, 262144), 1024, cost(TRUE))
    bounded = shapes.worst_step(Limits(128, 2048, 262144, kv_cache_tokens=400_000), 1024, cost(TRUE))
    assert bounded.context_held <= 400_000 < free.context_held
    assert bounded.chunks == free.chunks and bounded.decode_context < free.decode_context


def test_the_worst_run_sends_requests_that_form_the_plan() -> None:
    lim = Limits(36, 96, 48)
    plan = shapes.worst_step(lim, None, cost(TRUE))
    run = runs.worst_run(plan, lim)
    decodes, arriving = run.waves
    assert len(decodes.prompts) == plan.decodes
    assert all(p + decodes.max_tokens <= lim.max_model_len for p in decodes.prompts)
    assert sum(arriving.prompts) - arriving.prefix >= sum(c.tokens * c.count for c in plan.chunks)
    work, n = runs.run_work(run, lim, None)
    assert work.tokens >= run.prefill_tokens and n > 1


# --- the serving limits vLLM refuses ---------------------------------------------------------------

GIVEN = {
    "max_num_seqs": "--max-num-seqs 300",
    "max_num_batched_tokens": "--max-num-batched-tokens 256",
    "max_model_len": "--max-model-len 4096",
    "kv_cache_tokens": "--kv-cache-tokens 100",
}


def test_limits_vllm_refuses_are_refused() -> None:
    assert "vLLM refuses max_num_batched_tokens (256) < max_num_seqs (300)" in str(
        shapes.limits_problem(Limits(300, 256, 4096), 8192, GIVEN)
    )
    assert "longer than the model allows (512" in str(shapes.limits_problem(Limits(8, 256, 4096), 512, GIVEN))
    assert "cannot hold one request" in str(shapes.limits_problem(Limits(8, 256, 4096, 100), None, GIVEN))
    assert shapes.limits_problem(Limits(8, 256, 4096), None, GIVEN) is None


def test_the_models_longest_context_is_read_as_vllm_derives_it() -> None:
    assert shapes.model_max_len(config_26b()) == 262144
    assert shapes.model_max_len({"max_position_embeddings": 4096, "n_positions": 2048}) == 2048
    assert (
        shapes.model_max_len(
            {"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}
        )
        == 16384
    )
    assert (
        shapes.model_max_len(
            {"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
        )
        == 4096
    )
    assert shapes.model_max_len({}) is None
