"""The decode-only calibration's numbers, pure: what ``enginedead calibrate --batch-sizes`` advises."""

from __future__ import annotations

from pytest_enginedead.logic.sizing.decode import (
    DecodeSteps,
    calibration,
    calibration_json,
    format_calibration,
)
from pytest_enginedead.logic.timeouts.policies import STOCK_DEADLINE_S


def test_calibration_numbers_meet_the_reference_constraints() -> None:
    """Pure: recommendations never below stock, never above the cap, monotone, headroom kept."""
    results = [DecodeSteps(1, 64, 0.5, 0.6, 0.7), DecodeSteps(8, 64, 4.0, 4.5, 5.0),
               DecodeSteps(64, 64, 200.0, 320.0, 330.0)]
    answer = calibration(results, 3.0, STOCK_DEADLINE_S, vllm="x", model="/m/heavy")
    out = calibration_json(answer)
    rec = [r["recommended_s"] for r in out["results"]]
    assert rec == sorted(rec) and rec[0] >= STOCK_DEADLINE_S and rec[-1] <= 7200
    assert rec[-1] >= 3.0 * 320.0  # headroom over the measured p99
    assert [r["stock_fires"] for r in out["results"]] == [False, False, True]
    assert out["results"][2]["p99_s"] == 320.0 and out["fit"]["form"] == "step = a + b x batch"
    text = format_calibration(answer)
    assert "FIRES" in text and "export VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=" in text
