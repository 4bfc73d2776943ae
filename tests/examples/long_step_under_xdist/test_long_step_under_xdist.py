"""A 16 s step for an xdist worker to be killed in, beside a plain test for the other.

Writes the pid of the xdist worker that runs the step into ``generating``.
"""

import os
import pathlib

import pytest


@pytest.mark.enginedead_batch_sizes(8)
@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)
def test_long_step(vllm_engine):
    pathlib.Path("generating").write_text(str(os.getpid()))
    vllm_engine.generate(max_tokens=4)


def test_other():
    pass
