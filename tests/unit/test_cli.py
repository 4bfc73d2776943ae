"""The ``enginedead`` command without engines: bad input, help, the calibration numbers.

(The regression check and a real calibration run in ``tests/engine/test_commands.py``.)
"""

from __future__ import annotations

import pytest

from pytest_enginedead.logic.policy import STOCK_DEADLINE_S
from pytest_enginedead.logic.sizing.decode import calibration, format_calibration
from tests.support.downstream import enginedead


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check", "--batch-sizes", "abc"], "argument --batch-sizes: 'abc' is not a whole number"),
        (["check", "--batch-sizes", "0"], "argument --batch-sizes: batch size 0 must be at least 1"),
        (
            ["check", "--model", "/no/such/dir"],
            "argument --model: model directory '/no/such/dir' does not exist",
        ),
        (
            ["check", "--policy", "nosuch_mod:attr"],
            "enginedead check: error: --policy 'nosuch_mod:attr': no module named 'nosuch_mod'",
        ),
        (["check", "--stock-deadline", "0.5"], "argument --stock-deadline: '0.5'"),
        (["calibrate", "--headroom", "0"], "argument --headroom: '0' must be above 0"),
        (["calibrate", "--headroom", "-1"], "argument --headroom: '-1' must be above 0"),
        (["calibrate", "--headroom", "x"], "argument --headroom: 'x' is not a number"),
        (["calibrate", "--steps", "0"], "argument --steps: '0' must be at least 1"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], needle: str) -> None:
    """argparse convention: exit 2, one line naming the value, no traceback."""
    done = enginedead(*args)
    assert done.returncode == 2, done
    assert needle in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_help_lists_both_commands() -> None:
    done = enginedead("--help")
    assert done.returncode == 0
    assert "check" in done.stdout and "calibrate" in done.stdout


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
