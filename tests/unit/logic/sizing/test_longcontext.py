"""A forecast that holds at long context: contexts measured a factor 16 apart, keys read apart from keys
attended, floors from the model's shape, and an interval the advice is taken from."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.logic.sizing import advice, floors, forecast, joint, kvcache, slices
from pytest_enginedead.logic.sizing import runs as runs_
from pytest_enginedead.logic.sizing.fit import Fit, Step, Uncertainty, fit_steps, step_spread
from pytest_enginedead.logic.sizing.jsonout import answer_json
from pytest_enginedead.logic.sizing.plan import plan_sizing
from pytest_enginedead.logic.sizing.result import Measured, round_of, sizing_answer
from pytest_enginedead.logic.sizing.shapes import Chunk, Limits, StepPlan
from pytest_enginedead.logic.sizing.text import format_sizing
from tests.support.sizing import COEF, GEMMA_26B, config_26b, priced

# --- the runs: contexts with leverage ------------------------------------------------------------------


def test_the_runs_measure_contexts_a_factor_32_apart() -> None:
    """At the report's limits: the context run's prompt is 8K tokens (its chunks attend from one
    chunk's keys to all 8K), and 8 decodes run at 256, 2K and 8K tokens of context, their prompts
    going on past the long prompt (found in the prefix cache: a short prefill each)."""
    runs = runs_.fit_runs(Limits(128, 2048, 262144), 1024, (1, 8, 32), 4)
    names = [r.name for r in runs]
    assert "context 8192 beside 8 decodes" in names
    rungs = [r for r in runs if r.name.startswith("8 decodes at")]
    assert [r.waves[0].shared for r in rungs] == [256, 2048, 8192]
    assert max(r.waves[0].shared for r in rungs) / min(r.waves[0].shared for r in rungs) >= 32
    assert all(r.prefill_tokens == 8 * runs_.LADDER_TAIL for r in rungs)  # the shared part is cached
    context_run = next(r for r in runs if r.name.startswith("context"))
    assert context_run.prefill_tokens == 8 + 8192  # the long prompt itself is prefilled
    assert runs_.ladder(512) == [16, 128, 512]


def test_a_forecast_measures_what_a_term_per_layer_needs_once() -> None:
    """The runs at long context and the decodes past 8 on the shallowest slice; the decodes of 1, 2
    and 8 and the short prefill, which tell the depth terms apart, on every slice."""
    plan = plan_sizing(str(GEMMA_26B), Limits(128, 2048, 262144), forecast_depths=(2, 1),
                       available_bytes=1 << 40)
    shallow, deep = plan.engines
    assert (shallow.depth, deep.depth) == (1, 2)
    assert [r.name for r in shallow.runs] == [r.name for r in plan.runs]
    assert [r.name for r in deep.runs] == ["decode batch 1", "decode batch 2", "decode batch 8",
                                           "prefill 8 x 16 tokens"]
    assert deep.limits.max_model_len < shallow.limits.max_model_len  # no long prompt: a smaller cache


def test_a_twin_warms_each_run_up_at_short_context() -> None:
    """A decode batch's twin runs its prompts' step and one decode; the long prompt's twin is its last
    chunk (and a whole one before it, unless a whole chunk is long enough to need no warming); a rung's
    twin prefills its own tokens only."""
    runs = runs_.fit_runs(Limits(128, 2048, 262144), 1024, (1, 8, 32), 4)
    by_name = {r.name: r for r in runs}
    assert runs_.warm_up(by_name["decode batch 8"], 2048).waves[0] == runs_.Wave((1,) * 8, 2)
    context = runs_.warm_up(by_name["context 8192 beside 8 decodes"], 2048)
    assert [w.prompts for w in context.waves] == [(1,) * 8, (2040 + 8192 % 2040,)]
    quick = runs_.warm_up(by_name["context 8192 beside 8 decodes"], 2048, whole_chunk=False)
    assert quick.waves[1].prompts == (8192 % 2040,)
    rung = runs_.warm_up(by_name["8 decodes at 8192 tokens of context"], 2048)
    assert rung.waves[0].prompts == (runs_.LADDER_TAIL,) * 8 and rung.waves[0].shared == 0
    whole = runs_.Run("whole chunks", (runs_.Wave((8192,), 1, shared=8192),), long=True)
    assert runs_.warm_up(whole, 2048, whole_chunk=False).waves == ()  # nothing left worth warming
    assert runs_.heaviest(by_name["context 8192 beside 8 decodes"], 2048) == Step(9, 2048, 0)
    assert runs_.heaviest(by_name["decode batch 32"], 2048) == Step(32, 32, 0)


def test_the_ladder_s_prompts_find_the_long_prompt_in_whole_blocks() -> None:
    """At vLLM's defaults on a model of 512 tokens the long prompt is 498 tokens: its rungs of half a
    block and more are whole blocks (the prefix cache finds a prompt in whole blocks, and each of the 8
    prompts prefills what it does not find), so the ladder prefills each prompt's own tokens and the
    rung under half a block, no more."""
    assert runs_.ladder(498) == [15, 128, 384]
    assert runs_.ladder(8064) == [256, 2048, 8064]
    assert runs_.ladder(100) == [3, 25, 100]  # no whole block to find
    runs = runs_.fit_runs(Limits(128, 2048, 512), 128, (1, 8, 32), 4)
    rungs = [r for r in runs if r.name.startswith("8 decodes at")]
    assert [r.waves[0].shared for r in rungs] == [15, 128, 384]
    assert sum(r.prefill_tokens for r in rungs) == 8 * (15 + runs_.LADDER_TAIL) + 2 * 8 * runs_.LADDER_TAIL


def test_a_short_model_measures_what_its_length_allows() -> None:
    runs = runs_.fit_runs(Limits(8, 256, 256), None, (1, 8), 4)
    assert all(r.longest <= 256 for r in runs)
    assert runs_.context_length(Limits(8, 2048, 8192), 1024, 4) == 8064  # whole blocks, room for the ladder
    assert runs_.context_length(Limits(8, 2048, 32768), 1024, 4) == 8192


def test_the_recorded_keys_read_are_the_plans() -> None:
    """A decode reads its context once; a chunk reads its context once for all its queries; in a
    sliding layer a decode reads the window, a chunk the window before its first token and its own."""
    step = StepPlan(3, 5000, (Chunk(100, 4900), Chunk(50, 0, 2))).step(1024)
    assert step.read_tokens == 3 * 5000 + 5000 + 2 * 50
    assert step.window_read_tokens == 3 * 1024 + (1023 + 100) + 2 * 50


# --- the fit: keys read, floors, the interval --------------------------------------------------------


#: what a long-context step costs: keys read by decodes far dearer than keys attended by a chunk
LONG = {"fixed": 0.1, "per_seq": 0.01, "per_token": 0.005, "per_context_token": 2e-9,
        "per_read_token": 4e-7}


def long_steps(noise: float = 0.0, seed: int = 1) -> list[tuple[Step, float]]:
    rng = random.Random(seed)
    truth = Fit(LONG)
    plans = [StepPlan(n, 3) for n in (1, 8, 32)]
    plans += [StepPlan(0, 0, (Chunk(2048, 2048 * k),)) for k in range(8)]
    plans += [StepPlan(8, c) for c in (1024, 4096, 16384)]
    return [(p.step(None), truth.predict(p.step(None)) * (1 + rng.uniform(-noise, noise)))
            for p in plans for _ in range(3)]


def test_keys_read_and_keys_attended_are_told_apart() -> None:
    """Decodes at long context and prefill chunks at long context cost differently per key; with both
    measured the two terms come back, and a step of 8 decodes at 262K is forecast from the reads."""
    fitted = fit_steps(long_steps(), ("fixed", "per_seq", "per_token", "per_context_token", "per_read_token"))
    for term, value in LONG.items():
        assert fitted.terms[term] == pytest.approx(value, rel=1e-6), term
    far = StepPlan(8, 262143).step(None)
    assert fitted.predict(far) == pytest.approx(Fit(LONG).predict(far), rel=1e-6)


def test_repeated_steps_spread_and_the_interval_holds_the_forecast() -> None:
    noisy = long_steps(noise=0.05)
    fitted = fit_steps(noisy, ("fixed", "per_seq", "per_token", "per_context_token", "per_read_token"))
    assert fitted.uncertainty is not None and 0 < fitted.uncertainty.spread < 0.1
    far = StepPlan(127, 4000, (Chunk(1921, 260222),)).step(None)
    low, high = fitted.interval(far)
    assert low < fitted.predict(far) < high == fitted.upper(far)
    assert high / fitted.predict(far) < 1.5
    assert step_spread([(Step(1, 1, 1), t) for t in (1.0, 1.0, 1.0, 9.0)]) == 0  # robust to one outlier


def test_no_full_attention_term_falls_below_the_shapes_floor() -> None:
    """Slices measured at short context only (attention lost in the noise): the context terms are held
    at the floor the model's shape gives at this machine's measured rates, never 0."""
    cfg = config_26b()
    full = slices.layout(cfg)
    model = joint.JointModel.of(cfg, full)
    coef = {**COEF, "full_context": 0.0, "window_context": 0.0, "read": 0.0}
    parts = []
    for k in (1, 2):
        lay = slices.slice_layout(full, k)
        rows = [Step(n, n, n * 3, n * 3) for n in (1, 8, 32)] + [Step(8, 128, 8 * 70, 8 * 70)]
        parts.append((lay, [(s, priced(model, coef, s, lay)) for s in rows]))
    fc = forecast.fit_slices(parts, full, cfg)
    terms = fc.fit.terms
    assert terms["per_context_token"] > 0 and terms["per_read_token"] > 0
    assert fc.rates is not None
    low = floors.compute_floor(cfg, slices.FULL, fc.rates)
    assert fc.per_layer()[slices.FULL].per_context_token_s >= low * (1 - 1e-9)
    assert fc.floors_at()[slices.FULL][0] == pytest.approx(low)
    without = forecast.fit_slices(parts, full, cfg, floors=False)
    assert without.fit.terms["per_context_token"] == 0  # what the floors are for


def test_the_floor_is_the_shapes_work_at_the_measured_rate() -> None:
    """26B full layer: 2 x 16 heads x 512 = 16,384 multiply-adds a key, 4 KiB of K and V read."""
    cfg = config_26b()
    assert floors.attention_macs(cfg, slices.FULL) == 16384
    rate = floors.Rates(macs_per_s=1e10, bytes_per_s=1e10)
    assert floors.compute_floor(cfg, slices.FULL, rate) == pytest.approx(16384 / 1e10 / floors.MARGIN)
    assert floors.read_floor(cfg, slices.FULL, rate) == pytest.approx(4096 / 1e10 / floors.MARGIN)
    assert floors.rates(cfg, slices.layout(cfg), Fit({"per_token": 0.0})) is None


# --- the advice: from the interval's upper end, bounded by the cache -----------------------------------


def test_the_advice_is_taken_from_the_intervals_upper_end() -> None:
    terms = ("fixed", "per_seq", "per_token", "per_context_token")
    point = Fit(dict.fromkeys(terms, 0.0) | {"per_token": 0.1, "per_context_token": 1e-6})
    wide = dataclasses.replace(point, uncertainty=Uncertainty(terms, tuple(
        tuple(0.0 for _ in terms) for _ in terms), spread=0.2))
    lim = Limits(16, 512, 4096)
    a, b = advice.advise(point, lim, None, 3.0, 300.0), advice.advise(wide, lim, None, 3.0, 300.0)
    assert b.worst_predicted_s == pytest.approx(a.worst_s)
    assert b.worst_s == pytest.approx(a.worst_s * (1 + 1.645 * 0.2))
    assert b.recommended_s >= a.recommended_s and b.worst_interval_s is not None
    assert b.as_dict()["from_interval_upper_s"] == b.worst_s


# --- what a run found: repeats, the cache, the contexts measured ----------------------------------------


def test_two_rounds_on_one_engine_are_fitted_alone_and_compared(tmp_path: Path) -> None:
    cfg = config_26b()
    plan = plan_sizing(str(GEMMA_26B), Limits(128, 2048, 262144), forecast_depths=(1, 2),
                       available_bytes=1 << 40)
    plan = dataclasses.replace(plan, kv=kvcache.server_cache(cfg, 262144, 2048, this_memory=24 * kvcache.GIB))
    model = joint.JointModel.of(cfg, plan.layout)
    coef = dict(COEF)
    shapes_ = [StepPlan(n, 3) for n in (1, 8, 32)]
    shapes_ += [StepPlan(8, 20, (Chunk(2040, 2040 * k),)) for k in range(8)]
    shapes_ += [StepPlan(8, 20, (Chunk(64, 16320),))]  # the long prompt's last chunk
    shapes_ += [StepPlan(8, c) for c in (512, 4096, 16384)]
    measured = []
    for ep in plan.engines:
        runs = {}
        for r, scale in ((0, 1.0), (1, 1.04)):
            steps = []
            for i, p in enumerate(shapes_):
                s = p.step(1024)
                t = scale * priced(model, coef, s, ep.layout)
                steps.append(StepTime(i, s.seqs, float(i), t, 1, s.tokens, s.context_tokens,
                                      s.window_context_tokens, s.read_tokens, s.window_read_tokens))
            runs["runs" if r == 0 else "runs #2"] = steps
        measured.append(Measured(ep, runs, rounds=2))
    answer = sizing_answer(plan, measured, 3.0, 300.0)
    out = answer_json(answer)
    first, second = out["repeats"]["worst_predicted_s"]
    assert second / first == pytest.approx(1.04, rel=0.01) and out["repeats"]["spread"] < 0.05
    seen = out["contexts_measured"]
    assert seen["decode"]["factor"] >= 16 and seen["prefill"]["factor"] >= 16, seen
    worst = out["worst_step"]
    assert worst["kv_cache_held_bytes"] <= worst["kv_cache_bytes"] and "kv_cache" in worst["binding"]
    assert out["kv_cache"]["memory_assumed"] is True
    assert worst["interval_s"][0] <= worst["predicted_s"] <= worst["interval_s"][1]
    assert any(r.get("fits_kv_cache") is False for r in out["results"])  # 128 decodes at 262K: no room
    text = format_sizing(answer)
    assert "KV cache:" in text and "limits that bind:" in text and "each round alone:" in text
    assert "the interval's upper end" in text
    assert round_of("runs #2") == 1 and round_of("runs") == 0 and round_of("decode batch 8") == 0
