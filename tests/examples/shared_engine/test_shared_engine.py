"""Tests that share one engine: each runs under its own deadline and its own faults.

Both need the same engine (batch 8, no guard), so it starts once; the order puts the longest
deadline first.  Run beside ``stock_vs_policy`` (tests/engine/test_engine.py), whose batch-64
engine they share: its false death at its own 2 s deadline, last, shows the deadline switched
per test (not this suite's 5 s or 680 s), with no death of their own to restart the engine for.
"""

import pytest

from pytest_enginedead import assert_no_false_death

pytestmark = pytest.mark.enginedead_batch_sizes(8)


@pytest.mark.enginedead_timeout(5)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.01)
def test_quick_steps_under_5s(vllm_engine):
    """0.08 s steps under a 5 s deadline."""
    with assert_no_false_death(vllm_engine):
        assert len(vllm_engine.generate(max_tokens=3)) == 8


@pytest.mark.enginedead_inject(slow_s_per_seq=0.2)
def test_slow_steps_under_the_policy(vllm_engine):
    """1.6 s steps under the reference policy's 680 s."""
    with assert_no_false_death(vllm_engine):
        assert len(vllm_engine.generate(max_tokens=3)) == 8
