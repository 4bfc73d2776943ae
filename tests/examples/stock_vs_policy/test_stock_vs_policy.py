"""vLLM's stock deadline (2 s) against the reference policy, with a busy 0.05 s/seq step.

Batch 2 fits under 2 s; batch 64 (3.2 s) is a false death; the policy survives batch 64.
"""

import pytest

from pytest_enginedead import assert_no_false_death

pytestmark = pytest.mark.enginedead_inject(slow_s_per_seq=0.05)


@pytest.mark.enginedead_batch_sizes(2, 64)
@pytest.mark.enginedead_timeout(2)
def test_stock_deadline(vllm_engine):
    with assert_no_false_death(vllm_engine):
        out = vllm_engine.generate(max_tokens=4)
    assert len(out) == vllm_engine.batch_size
    assert all(len(tokens) == 4 for tokens in out)


@pytest.mark.enginedead_batch_sizes(64)
@pytest.mark.enginedead_invariants("headroom", headroom=3)
def test_reference_policy(vllm_engine):
    with assert_no_false_death(vllm_engine):
        out = vllm_engine.generate(max_tokens=4)
    assert len(out) == 64
    steps = vllm_engine.step_times()
    assert steps and max(s.batch_size for s in steps) == 64
    assert all(s.seconds is not None and s.seconds > 0 for s in steps)
    assert vllm_engine.timeout_s >= 1240
