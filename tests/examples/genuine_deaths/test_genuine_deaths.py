"""Genuine deaths: a worker that blocks idle (HUNG) under vLLM's deadline, and one that spins at a
whole core without finishing a layer (HUNG: a livelock, not a false death), compiled as vLLM runs on
CPU by default.  The steps before each went through every layer of the model.

(A worker that exits, DEAD, is the ``factory`` suite's: its engine's last step, where here it
would cost an engine start of its own.)
"""

import pytest

from pytest_enginedead import Verdict, assert_no_false_death


@pytest.mark.enginedead_batch_sizes(4)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(hang_at_step=2)
def test_hang(vllm_engine):
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_engine):
            vllm_engine.generate(max_tokens=8)
    assert type(info.value).__name__ == "EngineDeadError"
    assert vllm_engine.deaths[-1]["verdict"] == Verdict.HUNG.name
    done = [s for s in vllm_engine.step_times_since_start() if s.seconds is not None]
    assert done and {s.layers for s in done} == {2}, done  # tiny-llama's two layers, eager


def test_a_spinning_worker_is_hung_not_a_false_death(vllm_engine_factory):
    """Compiled (vLLM's default on CPU): its first steps see both layers; at step 3 it spins in its
    first layer for the 15 s of the deadline: past the stall window, busy, not advancing."""
    engine = vllm_engine_factory(4, timeout_s=15, enforce_eager=False, inject={"spin_at_step": 3})
    with pytest.raises(Exception) as info:
        with assert_no_false_death(engine):
            engine.generate(max_tokens=8)
    assert type(info.value).__name__ == "EngineDeadError"
    death = engine.deaths[-1]
    reasons = [p.get("reason") or "" for p in death["processes"]]
    print(f"SPIN verdict={death['verdict']} reasons={reasons}")
    assert death["verdict"] == Verdict.HUNG.name, death
    assert any(r.startswith("spinning: ") for r in reasons), reasons
    done = [s for s in engine.step_times_since_start() if s.seconds is not None]
    assert len(done) >= 2 and {s.layers for s in done} == {2}, done  # compiled: both layers seen
