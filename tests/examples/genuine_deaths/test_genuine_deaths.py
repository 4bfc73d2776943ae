"""A genuine death: a worker that blocks idle (HUNG) under vLLM's deadline.

(A worker that exits, DEAD, is the ``factory`` suite's: its engine's last step, where here it
would cost an engine start of its own.)
"""

import pytest

from pytest_enginedead import Verdict, assert_no_false_death


@pytest.mark.enginedead_batch_sizes(4)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(hang_at_step=2)
def test_hang(vllm_engine):
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_engine):
            vllm_engine.generate(max_tokens=8)
    assert type(info.value).__name__ == "EngineDeadError"
    assert vllm_engine.deaths[-1]["verdict"] == Verdict.HUNG.name
