"""The decode-only calibration's numbers, pure: what ``enginedead calibrate --batch-sizes`` advises."""

from __future__ import annotations

from pytest_enginedead.logic.sizing.decode import calibration, format_calibration
from pytest_enginedead.logic.timeouts.policies import STOCK_DEADLINE_S


def test_calibration_numbers_meet_the_reference_constraints() -> None:
    """Pure: recommendations never below stock, never above the cap, monotone, headroom kept."""
    results = [
        {"batch_size": 1, "p50_s": 0.5, "p99_s": 0.6, "max_s": 0.7},
        {"batch_size": 8, "p50_s": 4.0, "p99_s": 4.5, "max_s": 5.0},
        {"batch_size": 64, "p50_s": 200.0, "p99_s": 320.0, "max_s": 330.0},
    ]
    out, policy = calibration(results, 3.0, STOCK_DEADLINE_S, vllm="x", model="/m/heavy")
    rec = [r["recommended_s"] for r in out["results"]]
    assert rec == sorted(rec) and rec[0] >= STOCK_DEADLINE_S and rec[-1] <= 7200
    assert rec[-1] >= 3.0 * 320.0  # headroom over the measured p99
    assert [r["stock_fires"] for r in out["results"]] == [False, False, True]
    text = format_calibration(out, policy)
    assert "FIRES" in text and "export VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=" in text
