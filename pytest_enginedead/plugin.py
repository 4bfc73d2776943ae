"""pytest wiring for pytest-enginedead: options, markers, fixtures, header, summary.

Logic lives in the modules named for it; this module only connects it to pytest.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from . import compat, distributed, hooks, invariants, markers, options, report
from .assertions import pop_settings, push_settings
from .engine import EngineHandle, EngineSpec, EngineStartError, Progress, budget_s
from .harness import (
    EnginePool,
    Need,
    Settings,
    base_spec,
    order,
    policy_timeout,
    resolve_settings,
    share,
    vllm_missing_reason,
)
from .policy import Backend


@dataclass
class Run:
    """Everything the plugin keeps for one pytest run."""

    settings: Settings
    pool: EnginePool
    results: report.Results
    cpu_bind: str | None = None


@dataclass(frozen=True)
class Plan:
    """The engine one test will get, or why it cannot get one."""

    batch_size: int
    spec: EngineSpec | None
    error: str | None = None


run_key = pytest.StashKey[Run]()
plan_key = pytest.StashKey[Plan]()
handle_key = pytest.StashKey[EngineHandle]()

ENGINE_FIXTURES = ("vllm_engine",)


def _run(config: pytest.Config) -> Run:
    return config.stash[run_key]


def settings_of(config: pytest.Config) -> Settings:
    """The resolved options of this run (for suites built on the plugin)."""
    return _run(config).settings


# --- configuration -----------------------------------------------------------------


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.addoptions(parser)


def pytest_configure(config: pytest.Config) -> None:
    for line in markers.DOCS:
        config.addinivalue_line("markers", line)
    settings = resolve_settings(config)
    pool = EnginePool(max_alive=1, progress=_progress_writer(config))
    config.stash[run_key] = Run(settings, pool, report.Results(), distributed.cpu_bind(config))
    push_settings(settings.liveness)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(distributed.ControllerHooks(config), "enginedead-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(run_key, None)
    if run is None:
        return
    pop_settings()
    run.pool.close()


def pytest_report_header(config: pytest.Config) -> str:
    s = _run(config).settings
    text = (
        f"enginedead: policy={s.policy_name} ({s.policy_source}), "
        f"batch_sizes={','.join(map(str, s.batch_sizes))}, "
        f"vllm={s.vllm_version or 'absent'}"
    )
    if s.model != options.BUNDLED_MODEL:
        text += f", model={s.model}"
    note = distributed.dist_note(config)
    if note:
        text += f"\nenginedead: {note}"
    if os.environ.get(compat.MULTIPROCESSING_ENV, "1").strip() == "0":
        text += (
            f"\nenginedead: {compat.MULTIPROCESSING_ENV}=0 ignored for harness engines: "
            "vLLM applies the deadline only in multiprocess mode"
        )
    return text


def _progress_writer(config: pytest.Config) -> Progress | None:
    """Progress lines straight to the terminal, even while output is captured."""
    if config.getoption("verbose") < 0 or distributed.is_worker(config):
        return None  # xdist workers share the controller's terminal: keep it tidy
    try:
        fd = os.dup(2)  # captured output is suspended while plugins configure
    except OSError:
        return None
    config.add_cleanup(lambda: os.close(fd))

    def write(message: str, done: bool = False) -> None:
        with contextlib.suppress(OSError):
            os.write(fd, f"\nenginedead: {message}{chr(10) if done else ''}".encode())

    return write


# --- collection: batch sizes, engine plan, order ---------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_batch_size" not in metafunc.fixturenames:
        return
    sizes: tuple[Any, ...] = _run(metafunc.config).settings.batch_sizes
    marker = metafunc.definition.get_closest_marker("enginedead_batch_sizes")
    if marker is not None:
        try:
            sizes = markers.batch_sizes(marker)
        except markers.BadMarker as exc:
            metafunc.parametrize("engine_batch_size", [exc], ids=["bad-batch-sizes"])
            return
    metafunc.parametrize("engine_batch_size", sizes, ids=[f"bs{n}" for n in sizes])


def _need(item: pytest.Item, run: Run) -> Need:
    batch = item.callspec.params.get("engine_batch_size")  # type: ignore[attr-defined]
    if isinstance(batch, Exception):
        raise markers.BadMarker(str(batch))
    timeout_marker = item.get_closest_marker("enginedead_timeout")
    inject_marker = item.get_closest_marker("enginedead_inject")
    injection = markers.inject(inject_marker) if inject_marker else None
    if timeout_marker is not None:
        seconds, source = markers.timeout(timeout_marker), "the enginedead_timeout marker"
    else:
        try:
            seconds, source = _policy_deadline(run, batch)
        except Exception as exc:
            raise markers.BadMarker(
                f"policy {run.settings.policy_name} raised {type(exc).__name__} for "
                f"timeout_s(CPU, {batch}): {exc}"
            ) from None
    return Need(batch, seconds, source, injection or markers.Injection())


def _policy_deadline(run: Run, batch: int) -> tuple[float, str]:
    """The active policy's deadline for a CPU engine at ``batch``, and what set it."""
    return float(run.settings.policy.timeout_s(Backend.CPU, batch)), f"policy {run.settings.policy_name}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = _run(config)
    plans: list[Plan | None] = []
    for item in items:
        if not any(f in getattr(item, "fixturenames", ()) for f in ENGINE_FIXTURES):
            plans.append(None)
            continue
        try:
            need = _need(item, run)
            plans.append(Plan(need.batch_size, base_spec(run.settings, need, run.cpu_bind)))
        except markers.BadMarker as exc:
            plans.append(Plan(0, None, str(exc)))
    if any(p and p.spec for p in plans) and vllm_missing_reason() is None:
        _check_architecture(run.settings.model, run.settings.model_source)
    specs = share([p.spec for p in plans if p and p.spec])
    run.results.configurations = len(set(specs))
    shared = iter(specs)
    entries: list[tuple[EngineSpec | None, int]] = []
    for item, plan in zip(items, plans):
        if plan is not None and plan.spec is not None:
            plan = Plan(plan.batch_size, next(shared))
            if item.get_closest_marker("timeout") is None and config.pluginmanager.hasplugin("timeout"):
                item.add_marker(pytest.mark.timeout(budget_s(plan.spec)))
        if plan is not None:
            item.stash[plan_key] = plan
        entries.append((plan.spec if plan else None, plan.batch_size if plan else 0))
    items[:] = [items[i] for i in order(entries)]
    if distributed.is_worker(config):
        distributed.publish_groups(
            config,
            ((it.nodeid, distributed.item_group(it, _plan_spec(it))) for it in items),
        )


def _plan_spec(item: pytest.Item) -> EngineSpec | None:
    plan = item.stash.get(plan_key, None)
    return plan.spec if plan is not None else None


def _check_architecture(model: str, source: str) -> None:
    """An unknown architecture fails here, once, not in every engine start."""
    path = os.path.join(model, "config.json")
    try:
        archs = options.read_architectures(path)
    except options.BadValue as exc:
        raise pytest.UsageError(f"enginedead: {exc}") from None
    try:
        known = compat.known_architectures()
    except Exception:
        return  # cannot ask this vLLM; the engine start will say
    unknown = [a for a in archs if a not in known]
    if unknown or not archs:
        raise pytest.UsageError(
            f"enginedead: {path} names architecture {', '.join(unknown) or '(none)'}, "
            f"which vLLM {compat.installed_version()} does not know "
            f"(--enginedead-model, from {source}); use one it supports, e.g. LlamaForCausalLM"
        )


# --- running ----------------------------------------------------------------------------


def pytest_runtest_setup(item: pytest.Item) -> None:
    plan = item.stash.get(plan_key, None)
    if plan is not None and plan.error:
        pytest.fail(plan.error, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    marker = item.get_closest_marker("enginedead_invariants")
    if marker is None:
        return (yield)
    try:
        req = markers.invariant_request(marker)
    except markers.BadMarker as exc:
        pytest.fail(str(exc), pytrace=False)
    run = _run(item.config)
    handle = item.stash.get(handle_key, None)
    after = ("headroom",) if handle is not None and req.step_times is None else ()
    _check_invariants(run, [n for n in req.names if n not in after], req, req.step_times)
    result = yield
    if after and "headroom" in req.names:
        assert handle is not None
        worst: dict[int, float] = {}
        for step in handle.step_times():
            if step.seconds is not None:
                worst[step.batch_size] = max(worst.get(step.batch_size, 0.0), step.seconds)
        _check_invariants(run, ["headroom"], req, worst)
    return result


def _check_invariants(run: Run, names: list[str], req: markers.InvariantRequest, steps: Any) -> None:
    if not names:
        return
    problems = invariants.check(
        run.settings.policy,
        names,
        batch_sizes=run.settings.batch_sizes,
        cap_s=req.cap_s,
        headroom=req.headroom,
        step_times=steps,
    )
    if problems:
        pytest.fail(
            f"policy {run.settings.policy_name} breaks {len(problems)} invariant(s):\n"
            + "\n".join(f"  {p}" for p in problems),
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    handle = item.stash.get(handle_key, None)
    if handle is not None:
        results = _run(item.config).results
        before = len(results.tests)
        results.observe(item, rep, handle)
        if rep.when == "call" and len(results.tests) > before:
            # junitxml reads properties from the teardown report, made after this
            item.user_properties.extend(report.junit_properties(results.tests[-1]))
    return rep


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    run = config.stash.get(run_key, None)
    if run is None:
        return
    try:
        run.pool.close()
    finally:
        run.results.close_engines(run.pool)
        run.pool.records.clear()
        if distributed.is_worker(config):
            distributed.send(config, run.results.to_wire())
        elif run.settings.report:
            report.write(run.settings.report, report.build(run.results, run.settings))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    run = config.stash.get(run_key, None)
    if run is not None:
        report.terminal_summary(terminalreporter, run.results, run.settings)


# --- fixtures ------------------------------------------------------------------------


@pytest.fixture
def enginedead_policy(pytestconfig: pytest.Config) -> Any:
    """The active timeout policy (``--enginedead-policy``, the hook, or the reference)."""
    return _run(pytestconfig).settings.policy


@pytest.fixture
def engine_batch_size(pytestconfig: pytest.Config) -> int:
    """The batch size this test's engine runs at (parametrized over the batch sizes)."""
    return _run(pytestconfig).settings.batch_sizes[0]


def _require_vllm() -> None:
    reason = vllm_missing_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def vllm_engine(request: pytest.FixtureRequest, engine_batch_size: int) -> Iterator[EngineHandle]:
    """A real vLLM CPU engine at ``engine_batch_size``, shared with tests of the same config."""
    _require_vllm()
    run = _run(request.config)
    plan = request.node.stash.get(plan_key, None)
    if plan is None or plan.spec is None:  # asked for outside collection's plan
        need = _need(request.node, run) if hasattr(request.node, "callspec") else Need(
            engine_batch_size, *_policy_deadline(run, engine_batch_size)
        )
        plan = Plan(need.batch_size, base_spec(run.settings, need, run.cpu_bind))
    assert plan.spec is not None
    try:
        engine = run.pool.acquire(plan.spec, request.node.nodeid)
    except EngineStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    handle = EngineHandle(
        engine, engine_batch_size, run.settings.policy_name,
        policy_timeout(run.settings.policy, engine_batch_size),
    )
    request.node.stash[handle_key] = handle
    try:
        yield handle
    finally:
        run.pool.release(engine)


@pytest.fixture
def vllm_engine_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., EngineHandle]]:
    """Start engines with explicit arguments; every engine it made is stopped afterwards.

    ``vllm_engine_factory(batch_size, timeout_s=None, inject=None, model=None, **engine_args)``
    """
    _require_vllm()
    run = _run(request.config)
    made: list[Any] = []

    def make(
        batch_size: int = 8,
        *,
        timeout_s: float | None = None,
        inject: markers.Injection | dict[str, Any] | None = None,
        model: str | None = None,
        **engine_args: Any,
    ) -> EngineHandle:
        __tracebackhide__ = True
        if timeout_s is None:
            seconds, source = _policy_deadline(run, batch_size)
        else:
            seconds, source = float(timeout_s), "vllm_engine_factory(timeout_s=...)"
        injection = markers.Injection(**inject) if isinstance(inject, dict) else (inject or markers.Injection())
        spec = replace(
            base_spec(run.settings, Need(batch_size, seconds, source, injection), run.cpu_bind),
            model=options.validate_model(model) if model else run.settings.model,
            extra_args=tuple(sorted(engine_args.items())),
        )
        try:
            engine = run.pool.start_dedicated(spec)
        except EngineStartError as exc:
            pytest.fail(str(exc), pytrace=False)
        made.append(engine)
        return EngineHandle(engine, batch_size, run.settings.policy_name,
                            policy_timeout(run.settings.policy, batch_size))

    try:
        yield make
    finally:
        for engine in made:
            engine.stop()
