"""What a sizing run found: one typed answer, read by the text and by the JSON."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.logic.sizing.jsonout import answer_json
from pytest_enginedead.logic.sizing.plan import plan_sizing
from pytest_enginedead.logic.sizing.result import HELD_OUT, Measured, fitted_runs, samples_of, sizing_answer
from pytest_enginedead.logic.sizing.shapes import Limits
from pytest_enginedead.logic.sizing.terms import Step
from pytest_enginedead.logic.sizing.text import format_sizing
from tests.support.sizing import COEF, GEMMA_26B, config_26b, slice_steps


def recorded(rows: list[tuple[Step, float]]) -> list[StepTime]:
    return [StepTime(i, s.seqs, float(i), t, 1, s.tokens, s.context_tokens, s.window_context_tokens,
                     s.read_tokens, s.window_read_tokens) for i, (s, t) in enumerate(rows)]


def test_the_answer_as_json_and_as_text(tmp_path: Path) -> None:
    """``sizing_answer`` on recorded steps: the keys the outside reads, forecast rows marked, and the
    text says the same worst step."""
    cfg = config_26b()
    plan = plan_sizing(
        str(GEMMA_26B), Limits(128, 2048, 262144), forecast_depths=(1, 2), available_bytes=1 << 40
    )
    measured = [Measured(ep, {"decode batch 8": recorded(slice_steps(ep.layout, COEF, cfg))})
                for ep in plan.engines]
    answer = sizing_answer(plan, measured, 3.0, 300.0)
    out = json.loads(json.dumps(answer_json(answer)))  # plain JSON all the way down
    assert {"terms", "worst_residual", "routing"} <= set(out["fit"])
    assert out["fit"]["routing"] == {"experts": 128, "per_token": 8, "layers": 30}
    assert {"seqs", "tokens", "context_tokens", "predicted_s", "measured_s"} <= set(out["worst_step"])
    assert out["worst_step"]["measured_s"] is None
    assert {"deadline_s", "max_num_seqs_under_deadline", "max_num_batched_tokens_under_deadline"} <= set(
        out["recommend"]
    )
    assert out["results"] and all(r["forecast"] is True for r in out["results"])
    assert {(r["batch_size"], r["context_tokens"]) for r in out["results"]} >= {(8, 1024), (128, 262143)}
    text = format_sizing(answer)
    assert "forecast to 30 layers" in text and "export VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=" in text
    assert f"{answer.worst.step.seqs} seqs, {answer.worst.step.tokens} tokens" in text
    assert "s/expert reached" in text and "experts reached per layer: 128 experts, 8 per token" in text


def test_held_out_runs_are_never_fitted() -> None:
    plan = plan_sizing(str(GEMMA_26B), Limits(128, 2048, 262144), forecast_depths=(1, 2),
                       available_bytes=1 << 40)
    cfg = config_26b()
    fitted = recorded(slice_steps(plan.engines[0].layout, COEF, cfg))
    kept = recorded([(s, t * 10) for s, t in slice_steps(plan.engines[0].layout, COEF, cfg)])
    m = Measured(plan.engines[0], {"decode batch 8": fitted, f"{HELD_OUT}decode batch 64": kept,
                                   "worst step": kept})
    assert len(fitted_runs(m)) == len(fitted)


def test_a_tensor_parallel_step_is_one_sample() -> None:
    """Two ranks' records of one step are one sample, at the slower rank's time."""
    records = [StepTime(5, 8, 1.0, 0.50, 11, 8, 100), StepTime(5, 8, 1.0, 0.52, 12, 8, 100)]
    assert samples_of(records) == [(Step(8, 8, 100), 0.52)]
