"""The fixtures' work: shared engines and servers, and the factories (``pytest_plugin.fixturedefs``
declares the fixtures and hands over to these when a test asks for one).

A shared engine (``vllm_engine``, ``vllm_server``) is the pool's for the test's planned
configuration; a factory starts engines of its own and stops every one it made.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from ..compat import llm_config, versions
from ..compat.in_node import multi_node_problem
from ..contract.control import Injection
from ..harness.engines.base import EngineBase
from ..harness.engines.coreready import EngineStartError
from ..harness.engines.environment import owned_cores
from ..harness.engines.startchecks import batch_problem, factory_engine_args, model_problem
from ..logic.inputs.arguments import BadMarker, factory_arguments, rank_count
from ..logic.inputs.modelconfig import model_label, validate_model
from ..logic.planning import engines
from ..logic.planning.engines import DeadlineAndFaults, EngineRequest, EngineSpec, TestPlan
from ..logic.planning.nodes import default_ranks, spread_problem
from ..logic.planning.ranks import BIND_ENV, cores_problem
from ..logic.timeouts.policies import PolicyFailure, policy_deadline
from .collection import guard_of, policy_allows, request_of
from .handles import EngineHandle, Handle, ServerHandle
from .run import Run, fail, handle_key, plan_key, run_of


def _require_vllm() -> None:
    reason = versions.vllm_missing_reason()
    if reason:
        pytest.skip(reason)


def _started(start: Callable[[], EngineBase]) -> EngineBase:
    """An engine from ``start``; a start vLLM refused fails the test with vLLM's reason."""
    __tracebackhide__ = True
    try:
        return start()
    except EngineStartError as exc:
        fail(str(exc))


def _handle(run: Run, engine: EngineBase, test: TestPlan) -> Handle:
    """The test's handle on ``engine``: its batch, its deadline and faults, what the policy allows."""
    assert test.instructions is not None
    kind = ServerHandle if engine.spec.server else EngineHandle
    return kind(engine, test.batch_size, test.instructions, run.settings.policy_name, test.policy_deadline_s,
                run.settings.liveness)


def _shared(request: pytest.FixtureRequest, batch_size: int) -> Iterator[Handle]:
    """The planned (shared) engine for this test, told its deadline and faults."""
    _require_vllm()
    run = run_of(request.config)
    test = request.node.stash.get(plan_key, None)
    if test is None or test.spec is None or test.instructions is None:
        asked = request_of(request.node, run, batch_size)  # asked for outside collection's plan
        if isinstance(asked, str):
            pytest.fail(asked, pytrace=False)
        test = TestPlan.of(asked, engines.spec_for(asked, run.settings.model, run.cpu_bind))
    spec, instructions = test.spec, test.instructions
    assert spec is not None and instructions is not None
    engine = _started(lambda: run.pool.acquire(spec, instructions, request.node.nodeid))
    handle = _handle(run, engine, test)
    request.node.stash[handle_key] = handle
    try:
        yield handle
    finally:
        run.pool.release(engine)


def engine(request: pytest.FixtureRequest, batch_size: int) -> Iterator[EngineHandle]:
    """``vllm_engine``: the planned shared engine."""
    for handle in _shared(request, batch_size):
        assert isinstance(handle, EngineHandle)
        yield handle


def server(request: pytest.FixtureRequest, batch_size: int) -> Iterator[ServerHandle]:
    """``vllm_server``: the planned shared API server."""
    for handle in _shared(request, batch_size):
        assert isinstance(handle, ServerHandle)
        yield handle


def _factory_request(run: Run, batch_size: Any, timeout_s: Any, inject: Any, server: bool,
                     item: pytest.Item) -> EngineRequest:
    """What ``vllm_engine_factory(...)`` asks for; bad arguments fail the test in one line.

    The guard is the test's ``enginedead_guard`` marker's, else the run's option's; the policy
    and the guard's policy are asked once, as for a planned test (``collection.request_of``).
    """
    __tracebackhide__ = True
    what = "vllm_server_factory" if server else "vllm_engine_factory"
    try:
        batch, seconds, faults = factory_arguments(batch_size, timeout_s, inject, what)
        allowed = policy_allows(run, batch)
        if seconds is None:
            deadline = allowed if allowed is not None else policy_deadline(
                run.settings.policy, run.settings.policy_name, batch)  # raises: the policy's own words
            source = f"policy {run.settings.policy_name}"
        else:
            deadline, source = seconds, f"{what}(timeout_s=...)"
    except BadMarker as exc:
        fail(str(exc))
    except PolicyFailure as exc:
        fail(f"{what}: {exc}")
    try:
        guard, cap = guard_of(item, run, batch)
    except BadMarker as exc:
        fail(str(exc))
    orders = DeadlineAndFaults(deadline, source, faults, from_policy=seconds is None)
    return EngineRequest(batch, orders, guard, server, policy_deadline_s=allowed, guard_cap_s=cap)


def _factory_model(model: Any, server: bool) -> str:
    """A factory's ``model=``: the same checks as every other model input, or the test fails in one line."""
    __tracebackhide__ = True
    what = "vllm_server_factory" if server else "vllm_engine_factory"
    try:
        path = os.fsdecode(os.fspath(model))
    except TypeError:
        fail(f"{what}: model={model!r} is not a path; give a model directory holding a config.json")
    problem = model_problem(path)
    if problem:
        fail(f"{what}: model={model!r}: {problem}")
    return validate_model(path)


def _factory_limits(run: Run, batch: int, model: Any, model_dir: str, engine_args: dict[str, Any],
                    server: bool) -> None:
    """The factory's model at the context its engine starts with (``max_model_len=``, else the
    harness's), the tokenizer a server loads, and its batch size within what vLLM builds and this
    machine holds: the test fails in one line, before anything starts."""
    __tracebackhide__ = True
    what = "vllm_server_factory" if server else "vllm_engine_factory"
    length = engine_args.get("max_model_len", llm_config.DEFAULT_MAX_MODEL_LEN)
    given = f"max_model_len={length!r}" if "max_model_len" in engine_args else ""
    problem = model_problem(model_dir, architecture=False, server=server, length_given=given,
                            max_model_len=length if isinstance(length, int) and not isinstance(length, bool)
                            else None)  # another kind of value: vLLM's parser or start says
    if problem:
        source = run.settings.model_source
        named = (f"model={model!r}" if model is not None
                 else f"{model_label(model_dir, source)} (from {source})")
        fail(f"{what}: {named}: {problem}")
    problem = batch_problem(model_dir, batch, server, engine_args, said=f"batch_size={batch}")
    if problem:
        fail(f"{what}: {problem}")


def _factory_spec(
    run: Run, asked: EngineRequest, model: Any, engine_args: dict[str, Any], server: bool
) -> EngineSpec:
    """The factory's engine; its engine (or server) arguments and model checked before it starts."""
    __tracebackhide__ = True
    what = "vllm_server_factory" if server else "vllm_engine_factory"
    try:
        factory_engine_args(what, engine_args, server)
    except BadMarker as exc:
        fail(str(exc))
    model_dir = run.settings.model if model is None else _factory_model(model, server)
    _factory_limits(run, asked.batch_size, model, model_dir, engine_args, server)
    args = dict(engine_args)
    try:
        nodes = rank_count(what, "nodes", args.pop("nodes", 1), "nodes: vLLM's --nnodes")
        tp = rank_count(what, "tensor_parallel_size", args.pop("tensor_parallel_size", None) or
                        default_ranks(nodes, None))
        pp = rank_count(what, "pipeline_parallel_size", args.pop("pipeline_parallel_size", 1))
    except BadMarker as exc:
        fail(str(exc))
    if nodes > 1:
        problem = spread_problem(tp * pp, nodes) or multi_node_problem()
        if problem:
            fail(f"{what}: nodes={nodes}, tensor_parallel_size={tp}, pipeline_parallel_size={pp}: {problem}")
    spec = replace(engines.spec_for(asked, model_dir, run.cpu_bind), extra_args=tuple(sorted(args.items())),
                   tensor_parallel=tp, pipeline_parallel=pp, nodes=nodes)
    if spec.ranks > 1 and BIND_ENV not in os.environ:
        cores = owned_cores(spec)
        owner = "this xdist worker" if run.cpu_bind is not None else "this run"
        problem = cores_problem(cores, spec.ranks, owner)
        if problem:
            fail(f"{what}: tensor_parallel_size={tp}, pipeline_parallel_size={pp}: {problem}")
    return spec


def _factory(request: pytest.FixtureRequest, server: bool) -> Iterator[Callable[..., Any]]:
    _require_vllm()
    run = run_of(request.config)
    made: list[EngineBase] = []

    def make(
        batch_size: int = 8,
        *,
        timeout_s: float | None = None,
        inject: Injection | dict[str, Any] | None = None,
        model: str | None = None,
        **engine_args: Any,
    ) -> Handle:
        __tracebackhide__ = True
        asked = _factory_request(run, batch_size, timeout_s, inject, server, request.node)
        spec = _factory_spec(run, asked, model, engine_args, server)
        engine = _started(lambda: run.pool.start_dedicated(spec, asked.instructions))
        made.append(engine)
        handle = _handle(run, engine, replace(TestPlan.of(asked, spec), batch_size=spec.max_num_seqs))
        request.node.stash[handle_key] = handle  # the report follows the latest one made
        return handle

    try:
        yield make
    finally:
        for engine in made:
            engine.stop()


def engine_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., EngineHandle]]:
    """``vllm_engine_factory``."""
    yield from _factory(request, server=False)


def server_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., ServerHandle]]:
    """``vllm_server_factory``."""
    yield from _factory(request, server=True)
