"""Sizing without vLLM: the step model, the worst-step bound, depth slices, the forecast, the advice,
what the worker records of a step, and the bad input ``enginedead calibrate`` refuses before any
engine starts.

(The same on real engines: ``tests/engine/test_serving_sizes.py``; figures from real runs:
``bench/sizing.py``.)
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_enginedead.compat import in_worker
from pytest_enginedead.contract.steps import (
    BEGIN_LINE,
    StepTime,
    attended_keys,
    parse_steps,
    read_steps,
    steps_path,
)
from pytest_enginedead.invllm import worker
from pytest_enginedead.logic.policy import STOCK_DEADLINE_S, Backend
from pytest_enginedead.logic.sizing import advice, fit, forecast, shapes, slices
from pytest_enginedead.logic.sizing.fit import Fit, Step
from pytest_enginedead.logic.sizing.plan import plan_sizing
from pytest_enginedead.logic.sizing.result import Measured, format_sizing, sizing_result
from pytest_enginedead.logic.sizing.shapes import Chunk, Limits, StepPlan
from tests.support.downstream import enginedead
from tests.unit.test_bad_input import assert_clean, wired  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parents[2]
GEMMA_26B = ROOT / "fixtures" / "gemma4-26b-a4b"
GEMMA_MOE = ROOT / "fixtures" / "gemma4-moe"


def config_26b() -> dict[str, Any]:
    return json.loads((GEMMA_26B / "config.json").read_text())


TRUE = {
    "fixed": 0.2,
    "per_seq": 0.01,
    "per_token": 0.1,
    "per_context_token": 2e-5,
    "per_window_context_token": 5e-6,
}


def synthetic(
    terms: dict[str, float], shapes_: list[Step], noise: float = 0.0, seed: int = 1
) -> list[tuple[Step, float]]:
    rng = random.Random(seed)
    truth = Fit(terms)
    return [(s, truth.predict(s) * (1 + rng.uniform(-noise, noise))) for s in shapes_]


SHAPES = [Step(n, n, n * 3, n * 3) for n in (1, 8, 32, 128)] + [
    Step(8, 128, 8 * 136, 8 * 136),
    Step(9, 2048, 2_100_000, 1_500_000),
    Step(9, 9, 2100 + 30, 1024 + 30),
    Step(1, 512, 131_328, 60_000),
    Step(4, 4, 4 * 2000, 4 * 1024),
]


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
    assert fitted.worst_step is not None and fitted.worst_measured_s is not None
    residual = abs(fitted.predict(fitted.worst_step) - fitted.worst_measured_s) / fitted.worst_measured_s
    assert residual == pytest.approx(fitted.worst_residual)
    assert fitted.as_dict()["worst_residual"] == fitted.worst_residual
    assert set(fitted.as_dict()["terms"]) == {"fixed_s", "per_seq_s"}


def test_no_steps_is_a_fit_error() -> None:
    with pytest.raises(fit.FitError, match="no finished step"):
        fit.fit_steps([(Step(1, 1, 1), 0.0)], ("fixed",))


# --- what the worker records ----------------------------------------------------------------------


def scheduler_output(new: list[tuple[str, int, int]], cached: list[tuple[str, int, int]]) -> Any:
    """A V1 SchedulerOutput as the worker sees it: (req_id, computed tokens, scheduled tokens)."""
    return SimpleNamespace(
        num_scheduled_tokens={r: n for r, _, n in new + cached},
        total_num_scheduled_tokens=sum(n for _, _, n in new + cached),
        scheduled_new_reqs=[SimpleNamespace(req_id=r, num_computed_tokens=c) for r, c, _ in new],
        scheduled_cached_reqs=SimpleNamespace(
            req_ids=[r for r, _, _ in cached], num_computed_tokens=[c for _, c, _ in cached]
        ),
    )


def test_the_recorded_shape_is_the_bounds_shape() -> None:
    """What the worker reads from vLLM's scheduler output and what the bound computes for the
    same step agree: decodes at 511 keys, a chunk after 300 tokens, a whole new prompt."""
    out = scheduler_output(
        new=[("p", 0, 64)], cached=[(f"d{i}", 510, 1) for i in range(5)] + [("c", 300, 100)]
    )
    tokens, context, window_context = in_worker.step_shape(out, window=128)
    plan = StepPlan(5, 511, (Chunk(100, 300), Chunk(64, 0)))
    assert (tokens, context, window_context) == (
        plan.step(128).tokens,
        plan.step(128).context_tokens,
        plan.step(128).window_context_tokens,
    )
    assert in_worker.step_shape(out) == (tokens, context, context)  # no window: capped = full
    assert in_worker.step_shape(SimpleNamespace(total_num_scheduled_tokens=3)) == (3, -1, -1)


def test_attended_keys_is_the_sum_it_says() -> None:
    for first, last, window in itertools.product(range(1, 9), range(0, 12), (None, 1, 3, 5, 20)):
        want = sum(k if window is None else min(k, window) for k in range(first, last + 1))
        assert attended_keys(first, last, window) == want, (first, last, window)


def test_the_step_record_carries_what_was_scheduled(tmp_path: Path) -> None:
    rec = worker.StepRecorder(str(tmp_path))
    try:
        rec.run_step(8, lambda: None, 64, 8192, 4096)
        rec.run_step(2, lambda: None)  # an older caller: unknown
    finally:
        rec.close()
    steps = read_steps(steps_path(str(tmp_path), __import__("os").getpid()), 1)
    assert [(s.batch_size, s.tokens, s.context_tokens, s.window_context_tokens) for s in steps] == [
        (8, 64, 8192, 4096),
        (2, None, None, None),
    ]
    old = BEGIN_LINE % (3, 4, 1.0)  # the old writer's line still reads
    assert parse_steps([old.decode()], 1)[0].tokens is None


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
    run = shapes.worst_run(plan, lim)
    decodes, arriving = run.waves
    assert len(decodes.prompts) == plan.decodes
    assert all(p + decodes.max_tokens <= lim.max_model_len for p in decodes.prompts)
    assert sum(arriving.prompts) - arriving.prefix >= sum(c.tokens * c.count for c in plan.chunks)
    work, n = shapes.run_work(run, lim, None)
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


# --- depth slices --------------------------------------------------------------------------------


def test_a_slice_keeps_the_first_layers_of_each_type_and_everything_else() -> None:
    cfg = config_26b()
    one, two = slices.slice_config(cfg, 1), slices.slice_config(cfg, 2)
    assert one["layer_types"] == ["sliding_attention", "full_attention"] and one["num_hidden_layers"] == 2
    assert two["layer_types"] == ["sliding_attention"] * 2 + ["full_attention"] * 2
    for key in (
        "hidden_size",
        "num_experts",
        "top_k_experts",
        "moe_intermediate_size",
        "vocab_size",
        "head_dim",
        "global_head_dim",
        "num_global_key_value_heads",
        "sliding_window",
        "max_position_embeddings",
    ):
        assert one[key] == cfg[key], key
    assert cfg["num_hidden_layers"] == 30  # the original is left alone
    assert slices.slice_indices(slices.layout(cfg), 2) == [0, 1, 5, 11]


def test_the_26b_config_holds_the_public_parameter_counts() -> None:
    """25.2 B parameters, 3.8 B active per token (the model card's figures) from the config alone."""
    cfg = config_26b()
    assert slices.weight_bytes(cfg) / 2 == pytest.approx(25.2e9, rel=0.01)
    lay = slices.layout(cfg)
    active = sum(slices.active_layer_params(cfg, t) for t in lay.layer_types) + 262144 * 2816
    assert active == pytest.approx(3.8e9, rel=0.02)
    assert lay.describe() == "30 layers (25 sliding_attention + 5 full_attention), window 1024"


@pytest.mark.parametrize(
    ("depths", "needle"),
    [
        ((1, 1), "give two different slice depths"),
        (
            (1, 6),
            "slice depth 6 is out of range: a slice keeps the first K layers of each layer type and this "
            "model has 5 full_attention layer(s), so K must be 1..5",
        ),
        ((0, 1), "slice depth 0 is out of range"),
    ],
)
def test_slice_depths_out_of_range(depths: tuple[int, ...], needle: str) -> None:
    assert needle in str(slices.slice_depths_problem(slices.layout(config_26b()), depths))


def test_a_slice_must_be_shallower_than_the_model() -> None:
    lay = slices.Layout(("full_attention",) * 3, None)
    assert "must be shallower" in str(slices.slice_depths_problem(lay, (1, 3)))
    assert slices.slice_depths_problem(lay, (1, 2)) is None


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"hidden_size": 8}, 'has no layers: "num_hidden_layers" is None'),
        ({"num_hidden_layers": 0}, 'has no layers: "num_hidden_layers" is 0'),
        ({"num_hidden_layers": 2, "layer_types": ["full_attention"]}, '"layer_types" names 1 layers'),
    ],
)
def test_a_config_without_layers_cannot_be_sliced(config: dict[str, Any], needle: str) -> None:
    with pytest.raises(slices.SliceError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        slices.layout(config)


def test_memory_per_slice() -> None:
    cfg = config_26b()
    one, two = (slices.memory(slices.slice_config(cfg, k), 1) for k in (1, 2))
    assert one.weights < two.weights < slices.memory(cfg, 1).weights
    per_layer_pair = two.weights - one.weights  # a sliding and a full layer: ~1.5 GB of experts each
    assert per_layer_pair == pytest.approx(2 * 1.55e9 * 2 / 2, rel=0.1)


# --- the forecast --------------------------------------------------------------------------------


def slice_steps(
    lay: slices.Layout, coef: dict[str, float], cfg: dict[str, Any], tied: bool = False
) -> list[tuple[Step, float]]:
    weights = forecast.layer_weights(cfg, slices.layout(cfg))
    out = []
    for s in SHAPES:
        feats = forecast._features(s, lay, weights, tied)
        out.append((s, sum(coef[t] * x for t, x in zip(forecast.JOINT_TERMS, feats, strict=True))))
    return out


COEF = {
    "fixed": 0.05,
    "per_seq": 0.15,
    "per_token": 0.01,
    "layer_fixed": 0.01,
    "layer_per_token": 0.025,
    "full_context": 3e-6,
    "window_context": 2e-6,
}


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


def test_the_results_the_json_carries(tmp_path: Path) -> None:
    """``sizing_result`` on recorded steps: the keys the outside reads, forecast rows marked."""
    cfg = config_26b()
    plan = plan_sizing(
        str(GEMMA_26B), Limits(128, 2048, 262144), forecast_depths=(1, 2), available_bytes=1 << 40
    )
    measured = []
    for ep in plan.engines:
        rows = slice_steps(ep.layout, COEF, cfg)
        steps = [
            StepTime(i, s.seqs, float(i), t, 1, s.tokens, s.context_tokens, s.window_context_tokens)
            for i, (s, t) in enumerate(rows)
        ]
        measured.append(Measured(ep, {"decode batch 8": steps}))
    out = sizing_result(plan, measured, 3.0, 300.0)
    assert {"terms", "worst_residual"} <= set(out["fit"])
    assert {"seqs", "tokens", "context_tokens", "predicted_s", "measured_s"} <= set(out["worst_step"])
    assert out["worst_step"]["measured_s"] is None
    assert {"deadline_s", "max_num_seqs_under_deadline", "max_num_batched_tokens_under_deadline"} <= set(
        out["recommend"]
    )
    assert out["results"] and all(r["forecast"] is True for r in out["results"])
    assert {(r["batch_size"], r["context_tokens"]) for r in out["results"]} >= {(8, 1024), (128, 262143)}
    text = format_sizing(out)
    assert "forecast to 30 layers" in text and "export VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=" in text


# --- bad input, before any engine starts -----------------------------------------------------------

TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
}

BAD = [
    (
        "depth-out-of-range",
        ["--model", str(GEMMA_26B), "--forecast-layers", "1,6"],
        "enginedead calibrate: error: --forecast-layers 1,6: slice depth 6 is out of range",
        None,
    ),
    (
        "depth-zero",
        ["--forecast-layers", "0,1"],
        "argument --forecast-layers: slice depth 0 must be at least 1",
        None,
    ),
    (
        "depth-not-a-number",
        ["--forecast-layers", "a"],
        "argument --forecast-layers: 'a' is not a whole number",
        None,
    ),
    (
        "depths-equal",
        ["--model", str(GEMMA_26B), "--forecast-layers", "2,2"],
        "give two different slice depths",
        None,
    ),
    (
        "config-without-layers",
        ["--model", "m", "--forecast-layers", "1,2"],
        'm/config.json has no layers: "num_hidden_layers" is None',
        {k: v for k, v in TINY.items() if k != "num_hidden_layers"},
    ),
    (
        "tokens-below-seqs",
        ["--max-num-seqs", "4096"],
        "--max-num-batched-tokens 2048 (vLLM's default for the CPU server) is below --max-num-seqs 4096: "
        "vLLM refuses max_num_batched_tokens (2048) < max_num_seqs (4096)",
        None,
    ),
    (
        "tokens-below-seqs-given",
        ["--max-num-seqs", "64", "--max-num-batched-tokens", "32"],
        "--max-num-batched-tokens 32 is below --max-num-seqs 64",
        None,
    ),
    (
        "model-len-too-long",
        ["--max-model-len", "4096"],
        "--max-model-len 4096 is longer than the model allows (512, from its config.json)",
        None,
    ),
    (
        "kv-cache-too-small",
        ["--kv-cache-tokens", "100"],
        "--kv-cache-tokens 100 cannot hold one request of --max-model-len 512",
        None,
    ),
    (
        "batch-above-seqs",
        ["--batch-sizes", "64", "--max-num-seqs", "16"],
        "--batch-sizes 64 exceed --max-num-seqs 16",
        None,
    ),
    ("seqs-zero", ["--max-num-seqs", "0"], "argument --max-num-seqs: '0' must be at least 1", None),
    (
        "deadline-fraction",
        ["--deadline", "1.5"],
        "argument --deadline: '1.5' is not a whole number of seconds",
        None,
    ),
    (
        "not-enough-memory",
        ["--model", "m"],
        "--model",
        {
            **TINY,
            "vocab_size": 2_000_000_000,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
        },
    ),
    (
        "slice-not-enough-memory",
        ["--model", "m", "--forecast-layers", "1,2"],
        "--forecast-layers: slice 1 (1 layers (1 full_attention)) needs",
        {
            **TINY,
            "num_hidden_layers": 8,
            "num_experts": 4096,
            "moe_intermediate_size": 65536,
            "hidden_size": 16384,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
        },
    ),
]


@pytest.mark.usefixtures("wired")  # an engine about to start fails the test
@pytest.mark.parametrize(("args", "needle", "config"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_sizing_input_is_one_line_exit_2_before_any_engine(
    tmp_path: Path,
    args: list[str],
    needle: str,
    config: dict[str, Any] | None,
) -> None:
    if config is not None:
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    done = enginedead("calibrate", *args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert done.stdout == ""
    assert_clean(done.stdout + done.stderr)
    assert needle in lines[0], (needle, lines[0])
    if "memory" in needle or "memory" in str(args) or "needs" in needle:
        assert "available" in lines[0]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"base_s": 1.0, "per_seq_s": 1.0, "per_token_s": -0.1}, "per_token_s must be a finite number >= 0"),
        ({"base_s": float("nan"), "per_seq_s": 1.0}, "base_s must be a finite number >= 0"),
        ({"base_s": 1.0, "per_seq_s": 1.0, "cap_s": 10.0}, "cap_s must be a number >= floor_s (300.0)"),
    ],
)
def test_a_linear_policy_refuses_what_no_deadline_can_be(kwargs: dict[str, float], needle: str) -> None:
    from pytest_enginedead.logic.policy import TimeoutPolicy

    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        TimeoutPolicy.linear(**kwargs)
    policy = TimeoutPolicy.linear(600.0, 10.0, 0.5, cap_s=5000.0)
    assert policy.timeout_s("cpu", 8, 100) == 600 + 80 + 50 and policy.timeout_s("cpu", 8) == 680
    assert policy.timeout_s("cpu", 1000, 10_000) == 5000  # the cap
