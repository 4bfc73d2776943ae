"""One 16 s step, far inside the policy: long enough to cut the run short in mid-step.

Writes ``generating`` into the run's directory when the step is about to begin.
"""

import pathlib

import pytest


@pytest.mark.enginedead_batch_sizes(8)
@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)  # 16 s steps, far inside the policy
def test_long_step(vllm_engine):
    pathlib.Path("generating").write_text("now")
    vllm_engine.generate(max_tokens=4)
