"""A server whose worker is in a 16 s step (Ctrl-C target) or hangs (pytest-timeout target).

Writes ``generating`` into the run's directory when the requests are about to go out.
"""

import pathlib

import pytest


@pytest.mark.enginedead_batch_sizes(8)
@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)
def test_long_step(vllm_server):
    pathlib.Path("generating").write_text("now")
    vllm_server.complete(max_tokens=4)


@pytest.mark.enginedead_batch_sizes(8)
@pytest.mark.enginedead_inject(hang_at_step=2)
@pytest.mark.timeout(8)
def test_hangs_until_cut(vllm_server):
    pathlib.Path("generating").write_text("now")
    vllm_server.complete(n=4, max_tokens=8)
