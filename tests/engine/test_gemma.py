"""The original report's model family, shrunk: a real-compute false death at a decode step."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from downstream import Downstream, assert_nothing_left, engine_processes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
pytestmark = pytest.mark.engine


@pytest.mark.smoke
def test_gemma4_moe_decode_batch_outlives_1s(downstream: Downstream, decoy: psutil.Process) -> None:
    """No injection, 1 s deadline: batch 8 lives; as 128 clients arrive 16 per step the
    decode batch grows, steps grow with it, and the first step past 1 s is a false
    death with the worker inside the MoE layers — after the first tokens were made."""
    result = downstream.copy("gemma").run(
        "-rA", f"--enginedead-model={FIXTURES / 'gemma4-moe'}", plugins=["timeout"],
        in_subprocess=True, report=True,
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "false engine death: vLLM raised EngineDeadError while its worker was still computing" in out
    assert "in burn" not in out  # nothing injected: the model itself
    # where the worker spent its time, over the stack samples taken at the death: the MoE layers
    where = next(line for line in out.splitlines() if line.startswith("  where:"))
    assert "fused_moe" in where, where
    data = result.report
    assert data is not None
    (test,) = [t for t in data["tests"] if t["when"] == "call"]
    assert test["verdict"] == "SLOW"
    (engine,) = data["engines"]
    assert engine["injection"] == "none" and engine["batch_size"] == 128
    (death,) = test["deaths"]
    (worker,) = [p for p in death["processes"] if p["step"]]
    dying_batch = worker["step"]["batch_size"]
    assert dying_batch > 16, "the first step of the arrivals (pure prefill) must not be the one that dies"
    assert_nothing_left(*engine_processes(data), decoy)
