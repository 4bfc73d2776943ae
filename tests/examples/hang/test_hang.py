"""A worker that hangs at step 2, cut by pytest-timeout after 6 s."""

import pathlib

import pytest


@pytest.mark.enginedead_batch_sizes(4)
@pytest.mark.enginedead_inject(hang_at_step=2)
@pytest.mark.timeout(6)
def test_hangs_until_cut(vllm_engine):
    pathlib.Path("generating").write_text("now")
    vllm_engine.generate(max_tokens=8)
