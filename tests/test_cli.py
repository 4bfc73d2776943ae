"""The ``enginedead`` command: bad input, the regression check's exit rule, calibration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_enginedead import compat
from pytest_enginedead.cli import calibration, format_calibration
from pytest_enginedead.policy import STOCK_DEADLINE_S

needs_vllm = pytest.mark.skipif(compat.installed_version() is None, reason="vLLM is not installed")


def enginedead(*args: str, timeout: float = 30, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_enginedead.cli", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check", "--batch-sizes", "abc"], "argument --batch-sizes: 'abc' is not a whole number"),
        (["check", "--batch-sizes", "0"], "argument --batch-sizes: batch size 0 must be at least 1"),
        (["check", "--model", "/no/such/dir"], "argument --model: model directory '/no/such/dir' does not exist"),
        (["check", "--policy", "nosuch_mod:attr"], "argument --policy: no module named 'nosuch_mod'"),
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


@needs_vllm
@pytest.mark.engine
@pytest.mark.parametrize(("policy", "code"), [("reference", 0), ("vllm-stock", 1)])
def test_check_exit_code_follows_false_deaths_under_the_policy(tmp_path: Path, policy: str, code: int) -> None:
    """The stock deadline kills the large batch falsely; exit 1 only when the chosen
    policy does too (vllm-stock), 0 when it survives (reference)."""
    report = tmp_path / "report.json"
    done = enginedead(
        "check", "--batch-sizes", "4,16", "--max-tokens", "2", "--policy", policy,
        "--report", str(report), timeout=600, cwd=tmp_path,
    )
    assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout[done.stdout.index("batch  run"):]
    lines = {tuple(ln.split()[:2]): ln for ln in table.splitlines()[1:] if ln.strip() and ln.split()[0].isdigit()}
    assert set(lines) == {("4", "stock"), ("4", "policy"), ("16", "stock"), ("16", "policy")}
    assert lines[("4", "stock")].endswith("ok")
    assert lines[("16", "stock")].endswith("false death")
    assert lines[("16", "policy")].endswith("ok" if code == 0 else "false death")
    verdict_line = "OK: no false death under policy" if code == 0 else "FAIL: 1 false death(s) under policy"
    assert verdict_line in done.stdout
    data = json.loads(report.read_text())
    assert data["policy"]["name"] == policy


@needs_vllm
@pytest.mark.engine
def test_calibrate_tiny_model(tmp_path: Path) -> None:
    """Batch sizes 1, 8, 64 on the tiny model: monotone step times, recommendations that
    meet the reference constraints, and a real PNG."""
    png = tmp_path / "steps.png"
    done = enginedead(
        "calibrate", "--batch-sizes", "1,8,64", "--steps", "24", "--json", "--plot", str(png),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    results = out["results"]
    assert [r["batch_size"] for r in results] == [1, 8, 64]
    p50 = [r["p50_s"] for r in results]
    # The bundled model's logits (hidden 256 x vocab 32000) make 64 sequences cost ~3x one
    # even with the other core busy; 1 vs 8 is within noise on this model, so not asserted.
    assert max(p50[0], p50[1]) < p50[2], p50
    assert out["fit"]["b_s_per_seq"] > 0, out["fit"]
    assert all(r["steps"] >= 20 for r in results)
    rec = [r["recommended_s"] for r in results]
    assert rec == sorted(rec) and rec[0] >= STOCK_DEADLINE_S and rec[-1] <= 7200
    assert all(rec_s >= 3 * r["p99_s"] for rec_s, r in zip(rec, results))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
