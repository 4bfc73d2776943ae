"""What ``VLLM::Worker`` differs in between releases: where a step runs, what it schedules."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

from pytest_enginedead.compat import in_worker
from pytest_enginedead.logic.sizing.shapes import Chunk, StepPlan


def test_worker_targets() -> None:
    v1 = ("vllm.v1.worker.worker_base", "WorkerWrapperBase", "execute_model")
    assert in_worker.worker_step_target("0.27.1") == v1
    assert in_worker.worker_step_target("0.32.0") == v1
    assert in_worker.worker_step_target(None) == v1  # unknown: the newest behaviour
    assert in_worker.worker_step_target("0.9.2")[0] == "vllm.worker.worker_base"
    assert in_worker.worker_sample_method("0.32.0") == "sample_tokens"
    assert in_worker.worker_sample_method("0.9.2") is None


def test_batch_size_of_a_step() -> None:
    class V1Step:
        num_scheduled_tokens: ClassVar[dict[str, int]] = {"a": 1, "b": 1, "c": 4}

    class V0Step:
        seq_group_metadata_list: ClassVar[list[object]] = [object(), object()]

    assert in_worker.step_batch_size(V1Step()) == 3
    assert in_worker.step_batch_size(V0Step()) == 2
    assert in_worker.step_batch_size(object()) == 0


# --- what the worker records ----------------------------------------------------------------------


def scheduler_output(new: list[tuple[str, int, int]], cached: list[tuple[str, int, int]]) -> Any:
    """A V1 SchedulerOutput as the worker sees it: (req_id, computed tokens, scheduled tokens)."""
    return SimpleNamespace(
        num_scheduled_tokens={r: n for r, _, n in new + cached},
        total_num_scheduled_tokens=sum(n for _, _, n in new + cached),
        scheduled_new_reqs=[SimpleNamespace(req_id=r, num_computed_tokens=c) for r, c, _ in new],
        scheduled_cached_reqs=SimpleNamespace(
            req_ids=[r for r, _, _ in cached], num_computed_tokens=[c for _, c, _ in cached]
        ),
    )


def test_the_recorded_shape_is_the_bounds_shape() -> None:
    """What the worker reads from vLLM's scheduler output and what the bound computes for the
    same step agree: decodes at 511 keys, a chunk after 300 tokens, a whole new prompt; keys
    attended (summed over tokens) and keys read (each sequence's context once)."""
    out = scheduler_output(
        new=[("p", 0, 64)], cached=[(f"d{i}", 510, 1) for i in range(5)] + [("c", 300, 100)]
    )
    shape = in_worker.step_shape(out, window=128)
    plan = StepPlan(5, 511, (Chunk(100, 300), Chunk(64, 0)))
    step = plan.step(128)
    assert shape == (step.tokens, step.context_tokens, step.window_context_tokens, step.read_tokens,
                     step.window_read_tokens)
    assert step.read_tokens == 5 * 511 + 400 + 64  # a chunk reads its context once, not per query
    assert step.window_read_tokens == 5 * 128 + min(400, 127 + 100) + 64
    tokens, context = shape[:2]
    assert in_worker.step_shape(out) == (tokens, context, context, step.read_tokens, step.read_tokens)
    assert in_worker.step_shape(SimpleNamespace(total_num_scheduled_tokens=3)) == (3, -1, -1, -1, -1)
    decodes = scheduler_output(new=[], cached=[(f"d{i}", 510, 1) for i in range(5)])
    alone = StepPlan(5, 511).step(128)
    assert in_worker.step_shape(decodes, window=128) == (
        5, alone.context_tokens, alone.window_context_tokens, alone.read_tokens, alone.window_read_tokens)
