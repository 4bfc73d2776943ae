"""What a sizing run found, as the JSON carries it and as text."""

from __future__ import annotations

from pathlib import Path

from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.logic.sizing.plan import plan_sizing
from pytest_enginedead.logic.sizing.result import Measured, format_sizing, sizing_result
from pytest_enginedead.logic.sizing.shapes import Limits
from tests.support.sizing import COEF, GEMMA_26B, config_26b, slice_steps


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
