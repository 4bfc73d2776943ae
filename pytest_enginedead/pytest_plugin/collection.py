"""Collection: what each test asks of its engine, the plan, the order, the shard.

A test whose markers cannot be read fails alone, in one line, at its setup.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest

from ..compat import llm_config, versions
from ..contract.control import Injection
from ..harness.engines.startchecks import batch_problem
from ..logic.inputs.arguments import BadMarker
from ..logic.inputs.guardconfig import DEFAULT_HANG_S
from ..logic.planning import engines, sharding
from ..logic.planning.engines import DeadlineAndFaults, EngineRequest, EngineSpec, GuardSpec
from ..logic.timeouts.policies import PolicyError, PolicyFailure, load_policy, policy_deadline, policy_name
from . import distributed, markers, options
from .options import Settings
from .run import ENGINE_FIXTURES, FACTORY_FIXTURES, Run, fail, plan_key, run_of, uses_plugin
from .workerplan import EngineUses, WorkerPlan


def parametrize_batch_sizes(metafunc: pytest.Metafunc) -> None:
    if "engine_batch_size" not in metafunc.fixturenames:
        return
    sizes: tuple[Any, ...] = run_of(metafunc.config).settings.batch_sizes
    marker = metafunc.definition.get_closest_marker("enginedead_batch_sizes")
    if marker is not None:
        try:
            sizes = markers.batch_sizes(marker)
        except BadMarker as exc:
            metafunc.parametrize("engine_batch_size", [exc], ids=["bad-batch-sizes"])
            return
    metafunc.parametrize("engine_batch_size", sizes, ids=[f"bs{n}" for n in sizes])


def request_of(item: pytest.Item, run: Run, default_batch: int | None = None) -> EngineRequest | str:
    """What ``item`` asks of its engine, or why that cannot be read (the test's failure).

    The run's policy is asked once for what it allows at the test's batch size (the deadline,
    unless a marker fixes one), the guard's policy once for its cap: the test's plan keeps both.
    """
    callspec = getattr(item, "callspec", None)
    batch = callspec.params.get("engine_batch_size", default_batch) if callspec else default_batch
    inject = item.get_closest_marker("enginedead_inject")
    timeout = item.get_closest_marker("enginedead_timeout")
    try:
        if isinstance(batch, Exception) or batch is None:
            raise BadMarker(str(batch))
        faults = markers.inject(inject) if inject is not None else Injection()
        allowed = policy_allows(run, batch)
        if timeout is not None:
            deadline, source = markers.timeout(timeout), "the enginedead_timeout marker"
        else:
            deadline = allowed if allowed is not None else policy_deadline(
                run.settings.policy, run.settings.policy_name, batch)  # raises: the policy's own words
            source = f"policy {run.settings.policy_name}"
        server = "vllm_server" in getattr(item, "fixturenames", ())
        _check_batch(item, run, batch, server)
        guard, cap = guard_of(item, run, batch)
        orders = DeadlineAndFaults(deadline, source, faults, from_policy=timeout is None)
        return EngineRequest(batch, orders, guard, server, run.settings.tensor_parallel,
                             getattr(run.settings, "nodes", 1), policy_deadline_s=allowed, guard_cap_s=cap)
    except (BadMarker, PolicyFailure) as exc:
        return str(exc)


def policy_allows(run: Run, batch: int) -> float | None:
    """What the run's policy allows at ``batch`` on CPU; None when it cannot say (the evidence of a
    death then says nothing of the policy)."""
    try:
        return policy_deadline(run.settings.policy, run.settings.policy_name, batch)
    except PolicyFailure:
        return None


def _check_batch(item: pytest.Item, run: Run, batch: int, server: bool) -> None:
    """The test's batch size within what vLLM builds and this machine holds: a marker's fails the
    test (``BadMarker``); the run's (flag, variable, ini key) is a usage error naming it."""
    args = {"tensor_parallel_size": getattr(run.settings, "tensor_parallel", 1)}
    problem = batch_problem(run.settings.model, batch, server, args)
    if problem is None:
        return
    marker = item.get_closest_marker("enginedead_batch_sizes")
    if marker is not None:
        raise BadMarker(f"@pytest.mark.enginedead_batch_sizes{tuple(marker.args)!r}: {problem}")
    raise pytest.UsageError(f"enginedead: {run.settings.batch_sizes_where}: {problem}")


def guard_of(item: pytest.Item, run: Run, batch: int) -> tuple[GuardSpec | None, float | None]:
    """The guard this test's engine runs with (its marker, else the run's option, else none) and
    its cap at the test's batch size.

    Its policy is asked for the cap once, here, as the run's policy is asked for the deadline:
    a cap that is no number vLLM can wait (NaN, 0, text) fails the test.
    """
    marker = item.get_closest_marker("enginedead_guard")
    if marker is None and not run.settings.guard:
        return None, None
    hang_s, policy = markers.guard(marker) if marker is not None else (None, None)
    if policy is not None:
        try:
            search = [str(item.config.rootpath), os.getcwd()]
            loaded = load_policy(policy, search, versions.installed_version())
            cap = policy_deadline(loaded, policy_name(loaded, policy), batch)
        except (PolicyError, PolicyFailure) as exc:
            raise BadMarker(f"@pytest.mark.enginedead_guard: policy={policy!r}: {exc}") from None
    else:
        try:  # the run's policy is the guard's cap
            cap = policy_deadline(run.settings.policy, run.settings.policy_name, batch)
        except PolicyFailure as exc:
            source = "the enginedead_guard marker" if marker is not None else run.settings.guard_where
            raise BadMarker(f"the guard's cap ({source}): {exc}") from None
    spec = GuardSpec(hang_s or DEFAULT_HANG_S, policy or run.settings.policy_spec or "reference",
                     "the enginedead_guard marker" if marker is not None else run.settings.guard_where)
    return spec, cap


def uses_factory(item: pytest.Item) -> bool:
    return any(f in getattr(item, "fixturenames", ()) for f in FACTORY_FIXTURES)


def uses_engine(item: pytest.Item) -> bool:
    return any(f in getattr(item, "fixturenames", ()) for f in ENGINE_FIXTURES)


#: engine markers and the fixtures they act through
ENGINE_MARKERS = {
    "enginedead_timeout": ENGINE_FIXTURES,
    "enginedead_inject": ENGINE_FIXTURES,
    "enginedead_guard": (*ENGINE_FIXTURES, *FACTORY_FIXTURES),  # a factory's engines run it too
    "enginedead_batch_sizes": ("engine_batch_size", *ENGINE_FIXTURES),
}


def _stray_markers(item: pytest.Item) -> str | None:
    """Why a test without an engine cannot carry its engine markers, or None.

    Only markers written on the test itself (or on its ``pytest.param``) count: a
    class's or module's ``pytestmark`` applies to the engine tests it covers and is
    ignored by the others.  A bad batch-size marker on a test that takes only
    ``engine_batch_size`` fails it too.
    """
    names = getattr(item, "fixturenames", ())
    stray = sorted({m.name for m in item.own_markers
                    if m.name in ENGINE_MARKERS and not any(f in names for f in ENGINE_MARKERS[m.name])})
    if stray:
        return (
            f"{', '.join('@pytest.mark.' + n for n in stray)} on a test that uses no engine: "
            f"engine markers apply to tests that use {' or '.join(ENGINE_FIXTURES)}"
            + (" (or engine_batch_size, for enginedead_batch_sizes)"
               if "enginedead_batch_sizes" in stray else "")
            + ("; vllm_engine_factory and vllm_server_factory take their own arguments"
               if any(f.endswith("_factory") for f in names) else "")
        )
    callspec = getattr(item, "callspec", None)
    batch = callspec.params.get("engine_batch_size") if callspec else None
    return str(batch) if isinstance(batch, Exception) else None


def plan_collection(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's plan, once: its engine, its deadline, what the policy allows, the guard's cap
    (``engines.TestPlan``, in the item's stash); the run order; the shard."""
    run = run_of(config)
    with options.shown_whole_if_verbose(config):
        options.check_late_policy_hooks(config, run.settings)
    plan = engines.plan(
        [request_of(item, run) if uses_engine(item) else _stray_markers(item) for item in items],
        run.settings.model, run.cpu_bind,
    )
    if run.settings.shard is not None:
        plan = _keep_shard(config, run, items, plan)
    run.plugin_tests = any(uses_plugin(it) for it in items)
    run.results.configurations = plan.configurations
    _stash_plans(config, items, plan)
    items[:] = [items[i] for i in plan.order]
    _check_or_publish(config, run, items, plan)


def _stash_plans(config: pytest.Config, items: list[pytest.Item], plan: engines.Plan) -> None:
    """Each engine test's plan in its stash, and its pytest-timeout budget unless it set one."""
    budget = config.pluginmanager.hasplugin("timeout")
    for item, test in zip(items, plan.tests, strict=True):
        if test is None:
            continue
        item.stash[plan_key] = test
        if budget and item.get_closest_marker("timeout") is None and test.budget_s is not None:
            item.add_marker(pytest.mark.timeout(test.budget_s))


def _check_or_publish(config: pytest.Config, run: Run, items: list[pytest.Item], plan: engines.Plan) -> None:
    """The model the planned engines need, checked here; or, on an xdist worker, the plan published
    for the controller (which checks it once, for every worker)."""
    factories = [it for it in items if uses_factory(it)]
    engine_tests = len(plan.engine_specs) + len(factories)  # factories start the run's model too
    server_factory = any("vllm_server_factory" in getattr(it, "fixturenames", ()) for it in factories)
    uses = EngineUses(fixtures=bool(plan.engine_specs),
                      servers=server_factory or any(s.server for s in plan.engine_specs))
    groups = ((it.nodeid, distributed.item_group(it, planned_spec(it))) for it in items)
    controller_checks = distributed.is_worker(config) and distributed.publish_plan(
        config, WorkerPlan({nodeid: group for nodeid, group in groups if group}, engine_tests, uses,
                           run.plugin_tests),
    )
    if engine_tests and not controller_checks:  # under xdist the controller checks, once
        check_run_model(config, run.settings, uses)


def _keep_shard(
    config: pytest.Config, run: Run, items: list[pytest.Item], plan: engines.Plan
) -> engines.Plan:
    """Keep this shard's tests (``--enginedead-shard``) and their plan; the others are deselected.

    The shard is dealt by each test's engine configuration without the worker's core budget,
    so every xdist worker and every machine deals the same collection the same way.
    """
    assert run.settings.shard is not None
    keys = [replace(t.spec, cpu_bind=None) if t is not None and t.spec is not None else None
            for t in plan.tests]
    nodeids = [it.nodeid for it in items]
    run.split = sharding.split(keys, nodeids, run.settings.shard, run.durations)
    run.results.shard = run.split.to_dict(nodeids)
    kept = set(run.split.keep)
    dropped = [it for i, it in enumerate(items) if i not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = [items[i] for i in run.split.keep]
    return plan.keeping(run.split.keep)


def check_run_model(config: pytest.Config, settings: Settings, uses: EngineUses = EngineUses()) -> None:
    """The model the planned engines run, and vLLM's plugin list, checked once before the first
    starts: a UsageError.  ``uses``: what the planned engines start (the fixtures' engines: at the
    harness's max_model_len; an API server: with the model's tokenizer)."""
    with options.shown_whole_if_verbose(config):
        options.check_plugins()
        options.check_model(settings.model, settings.model_source,
                            llm_config.DEFAULT_MAX_MODEL_LEN if uses.fixtures else None, uses.servers)


def planned_spec(item: pytest.Item) -> EngineSpec | None:
    test = item.stash.get(plan_key, None)
    return test.spec if test is not None else None


def refuse_unplanned(item: pytest.Item) -> None:
    test = item.stash.get(plan_key, None)
    if test is not None and test.error:
        fail(test.error)
