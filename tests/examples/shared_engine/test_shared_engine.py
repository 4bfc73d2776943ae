"""Three tests, one engine: each runs under its own deadline and its own faults.

All three need the same engine (batch 8, no guard), so it starts once; the order puts
the longest deadline first and the test that kills it last.
"""

import pytest

from pytest_enginedead import assert_no_false_death

pytestmark = pytest.mark.enginedead_batch_sizes(8)


@pytest.mark.enginedead_timeout(3)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.01)
def test_quick_steps_under_3s(vllm_engine):
    """0.08 s steps under a 3 s deadline."""
    with assert_no_false_death(vllm_engine):
        assert len(vllm_engine.generate(max_tokens=3)) == 8


@pytest.mark.enginedead_inject(slow_s_per_seq=0.2)
def test_slow_steps_under_the_policy(vllm_engine):
    """1.6 s steps under the reference policy's 680 s."""
    with assert_no_false_death(vllm_engine):
        assert len(vllm_engine.generate(max_tokens=3)) == 8


@pytest.mark.enginedead_timeout(1)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.2)
def test_slow_steps_under_1s(vllm_engine):
    """1.6 s steps under a 1 s deadline: a false death after 1 s, not 3 s or 680 s."""
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=3)
