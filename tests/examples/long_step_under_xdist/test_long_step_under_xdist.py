"""A 16 s step for an xdist worker to be killed in, beside a plain test for the other.

Writes the pid of the xdist worker that runs the step into ``generating``.  xdist gives the
test of a killed worker to the worker that replaces it; that second run would start a second
engine for nothing the outer test looks at, so it is skipped before its engine starts.
"""

import os
import pathlib

import pytest


@pytest.fixture(autouse=True)
def _once(request):
    """Autouse: set up before ``vllm_engine``, so a skipped re-run starts no engine."""
    if "vllm_engine" in request.fixturenames and pathlib.Path("generating").exists():
        pytest.skip("run again after its xdist worker was killed: once is the point")


@pytest.mark.enginedead_batch_sizes(8)
@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)
def test_long_step(vllm_engine):
    pathlib.Path("generating").write_text(str(os.getpid()))
    vllm_engine.generate(max_tokens=4)


def test_other():
    pass
