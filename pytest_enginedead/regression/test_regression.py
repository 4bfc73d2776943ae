"""One concurrent decode batch per batch size, under the stock deadline and the policy.

Under the stock deadline a large batch is expected to die falsely on a slow step:
that is the bug, shown.  Under the policy (and under the guard) it must not.
"""

from __future__ import annotations

from pytest_enginedead import EngineHandle, assert_no_false_death
from pytest_enginedead.logic.reporting.checking import CheckMode, CheckPlan
from pytest_enginedead.pytest_plugin.handles import ServerHandle


def test_decode_batch(vllm_engine: EngineHandle, check_mode: CheckMode, check_plan: CheckPlan) -> None:
    with assert_no_false_death(vllm_engine):
        out = vllm_engine.generate(max_tokens=check_plan.max_tokens, prompt_len=check_plan.prompt_len)
    assert len(out) == vllm_engine.batch_size


def test_server_batch(vllm_server: ServerHandle, check_mode: CheckMode, check_plan: CheckPlan) -> None:
    with assert_no_false_death(vllm_server):
        out = vllm_server.complete(max_tokens=check_plan.max_tokens, prompt_len=check_plan.prompt_len)
    assert len(out) == vllm_server.batch_size
