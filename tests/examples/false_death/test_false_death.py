"""The false death, cold: batch 64 outlives a 2 s deadline while its worker computes.

Run by ``bench/run.py verdict`` (how fast the verdict comes, how long a cold reproduction takes).
"""

import pytest

from pytest_enginedead import assert_no_false_death


@pytest.mark.enginedead_batch_sizes(64)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.05)
def test_false_death(vllm_engine):
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=4)
