"""The shrunk Gemma-4 MoE's decode steps at two ranks, then one step under a 1 s deadline.

Run by ``bench/moe.py`` once per vLLM release; the report gives the steps' times and the
death's verdict, whose ``slow path:`` line names vLLM's per-expert MoE loop where it runs.
"""

import pytest

from pytest_enginedead import EngineHandle, assert_no_false_death


def test_decode_steps(vllm_engine: EngineHandle) -> None:
    vllm_engine.generate(4, max_tokens=2)  # the first steps compile: not measured
    vllm_engine.generate(max_tokens=6)


@pytest.mark.enginedead_timeout(1)
def test_a_step_under_one_second(vllm_engine: EngineHandle) -> None:
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=4)
