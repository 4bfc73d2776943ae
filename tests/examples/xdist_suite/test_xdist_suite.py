"""Two engine configurations for two xdist workers: a false death and a pass on one, a guarded crash."""

import time

import pytest

from pytest_enginedead import Verdict, assert_no_false_death


@pytest.mark.enginedead_batch_sizes(2, 64)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.05)
def test_stock_deadline(vllm_engine):
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=4)


@pytest.mark.enginedead_batch_sizes(8)
def test_policy(vllm_engine):
    with assert_no_false_death(vllm_engine):
        assert len(vllm_engine.generate(max_tokens=4)) == 8


@pytest.mark.enginedead_batch_sizes(4)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(crash_at_step=2)
@pytest.mark.enginedead_guard()
def test_crash(vllm_engine):
    """A crash under the guard is vLLM's worker monitor's: DEAD, as quick as without the guard."""
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_engine):
            vllm_engine.generate(max_tokens=8)
    assert type(info.value).__name__ == "EngineDeadError"
    assert vllm_engine.deaths[-1]["verdict"] == Verdict.DEAD.name
    assert time.monotonic() - started < 10
