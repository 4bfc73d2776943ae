"""The false death through vLLM's API server, cold: 64 concurrent requests outlive a 2 s deadline.

Only the server's stock-deadline batch-64 case, so a fresh pytest starts one server and
reproduces it.  Run by ``bench/run.py server`` (the cold reproduction through the server).
"""

import pytest

from pytest_enginedead import assert_no_false_death


@pytest.mark.enginedead_batch_sizes(64)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.05)
def test_server_false_death(vllm_server):
    with assert_no_false_death(vllm_server):
        vllm_server.complete(max_tokens=4)
