"""One concurrent decode batch per batch size, under the stock deadline and the policy.

Under the stock deadline a large batch is expected to die falsely on a slow step:
that is the bug, shown.  Under the policy it must not.
"""

from __future__ import annotations

from pytest_enginedead import EngineHandle, assert_no_false_death
from pytest_enginedead.checking import CheckPlan


def test_decode_batch(vllm_engine: EngineHandle, check_mode: str, check_plan: CheckPlan) -> None:
    with assert_no_false_death(vllm_engine):
        out = vllm_engine.generate(max_tokens=check_plan.max_tokens, prompt_len=check_plan.prompt_len)
    assert len(out) == vllm_engine.batch_size
