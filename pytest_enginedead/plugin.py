"""pytest wiring for pytest-enginedead: options, markers, fixtures, header, summary.

This module reads markers and options, keeps the run's state in the config's stash
and calls the modules that decide: ``planning`` (which engine each test gets and in
what order), ``pool`` (the engines alive), ``invariants``, ``report``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

import pytest

from .compat import versions
from .contract.control import Injection
from .contract.names import GUARD_ENV
from .contract.steps import worst_by_batch
from .face import distributed, hooks, markers, options, summary
from .face.assertions import run_settings
from .face.handles import EngineHandle, Handle, ServerHandle
from .face.options import Settings
from .harness import outputs
from .harness.base import EngineBase, EngineStartError
from .harness.fingerprint import this_machine
from .harness.pool import EnginePool
from .harness.preflight import factory_engine_args, model_problem
from .harness.threads import Progress
from .logic import invariants, planning, sharding
from .logic.arguments import BadMarker, factory_arguments
from .logic.guardconfig import DEFAULT_HANG_S
from .logic.modelconfig import BUNDLED_MODEL, validate_model
from .logic.planning import EngineSpec, GuardSpec, Instructions, Need, PolicyFailure, TestPlan
from .logic.policy import PolicyError, PolicyLike, load_policy
from .logic.report import Results, junit_properties


@dataclass
class Run:
    """Everything the plugin keeps for one pytest run."""

    settings: Settings
    pool: EnginePool
    results: Results
    cpu_bind: str | None = None
    #: the JSON report's path, claimed at the start (never on an xdist worker: the controller writes it)
    report: outputs.Output | None = None
    #: undoes what configure set up for the run (the liveness defaults)
    scope: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    #: recorded durations to balance shards by, and this shard's tests
    durations: sharding.Durations | None = None
    split: sharding.Split | None = None
    #: where this run's durations go (claimed at the start), and what they are so far
    store: outputs.Output | None = None
    seconds: dict[str, float] = field(default_factory=dict)


run_key = pytest.StashKey[Run]()
plan_key = pytest.StashKey[TestPlan]()
handle_key = pytest.StashKey[Handle]()

ENGINE_FIXTURES = ("vllm_engine", "vllm_server")
FACTORY_FIXTURES = ("vllm_engine_factory", "vllm_server_factory")


def _run(config: pytest.Config) -> Run:
    return config.stash[run_key]


def _fail(message: str) -> NoReturn:
    """Fail the test with ``message`` alone: no traceback, no chained exception."""
    __tracebackhide__ = True
    raise pytest.fail.Exception(message, pytrace=False) from None


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
    with options.shown_whole_if_verbose(config):
        settings = options.resolve_settings(config)
        claimed = store = None
        if not distributed.is_worker(config):
            try:
                if settings.report:
                    claimed = outputs.claim(settings.report, settings.report_where)
                if settings.store_durations:
                    store = outputs.claim(settings.store_durations, settings.store_durations_where,
                                          [o for o in (claimed,) if o is not None])
            except outputs.OutputError as exc:
                if claimed is not None:
                    claimed.close()
                raise pytest.UsageError(f"enginedead: {exc}") from None
        durations = _durations(settings)
    pool = EnginePool(max_alive=1, progress=_progress_writer(config))
    run = Run(settings, pool, Results(), distributed.cpu_bind(config), claimed,
              durations=durations, store=store)
    run.scope.enter_context(run_settings(settings.liveness))
    config.stash[run_key] = run
    config.pluginmanager.register(_Interrupted(pool), "enginedead-interrupt")
    if store is not None:
        config.pluginmanager.register(_StoreDurations(run.seconds), "enginedead-durations")
    if distributed.is_worker(config):
        config.pluginmanager.register(distributed.WorkerHooks(config), "enginedead-xdist-worker")
    elif config.pluginmanager.hasplugin("xdist"):
        controller = distributed.ControllerHooks(run.results, lambda: _check_model(config, settings))
        config.pluginmanager.register(controller, "enginedead-xdist")


def _durations(settings: Settings) -> sharding.Durations | None:
    """The durations file the run was given, read and checked now: a UsageError if unusable."""
    if settings.durations is None:
        return None
    where = settings.durations_where
    try:
        with open(settings.durations, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise pytest.UsageError(
            f"enginedead: {where}: {settings.durations!r} does not exist; write it with "
            "--enginedead-store-durations on a run of the whole suite"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise pytest.UsageError(
            f"enginedead: {where}: cannot read {settings.durations!r}: {reason}"
        ) from None
    try:
        return sharding.read_durations(text, where, settings.vllm_version or sharding.NO_VLLM)
    except sharding.ShardError as exc:
        raise pytest.UsageError(f"enginedead: {exc}") from None


class _StoreDurations:
    """Each test's setup + call + teardown seconds (xdist workers' reports included)."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration


class _Interrupted:
    """Ctrl-C reached pytest: the engines still running stop quickly, not gracefully."""

    def __init__(self, pool: EnginePool) -> None:
        self.pool = pool

    def pytest_keyboard_interrupt(self) -> None:
        self.pool.hurry()


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(run_key, None)
    if run is not None:
        run.scope.close()
        run.pool.close()
        for out in (run.report, run.store):
            if out is not None:
                out.close()
        if run.pool.started:
            # an engine filled this process's heap with vLLM's and torch's objects (a
            # million and more): pytest collects garbage five times as it exits, and
            # walking them all took 1-2 s a time; they live until the exit anyway
            gc.freeze()


def pytest_report_header(config: pytest.Config) -> str:
    s = _run(config).settings
    lines = [
        f"enginedead: policy={s.policy_name} ({s.policy_source}), "
        f"batch_sizes={','.join(map(str, s.batch_sizes))}, vllm={s.vllm_version or 'absent'}"
        + (f", model={s.model}" if s.model != BUNDLED_MODEL else "")
    ]
    note = distributed.dist_note(config)
    if note:
        lines.append(f"enginedead: {note}")
    if s.guard:
        lines.append(f"enginedead: the guard is on for every engine: {s.guard_where}" + (
            f"; {GUARD_ENV} is also the production switch: unset it to test engines without the guard"
            if "(from environment)" in s.guard_where else ""))
    if os.environ.get(versions.MULTIPROCESSING_ENV, "1").strip() == "0":
        lines.append(
            f"enginedead: {versions.MULTIPROCESSING_ENV}=0 ignored for harness engines: "
            "vLLM applies the deadline only in multiprocess mode"
        )
    return "\n".join(lines)


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


# --- collection: what each test needs, the plan, the order ------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_batch_size" not in metafunc.fixturenames:
        return
    sizes: tuple[Any, ...] = _run(metafunc.config).settings.batch_sizes
    marker = metafunc.definition.get_closest_marker("enginedead_batch_sizes")
    if marker is not None:
        try:
            sizes = markers.batch_sizes(marker)
        except BadMarker as exc:
            metafunc.parametrize("engine_batch_size", [exc], ids=["bad-batch-sizes"])
            return
    metafunc.parametrize("engine_batch_size", sizes, ids=[f"bs{n}" for n in sizes])


def _need(item: pytest.Item, run: Run, default_batch: int | None = None) -> Need | str:
    """What ``item`` asks of its engine, or why that cannot be read (the test's failure)."""
    callspec = getattr(item, "callspec", None)
    batch = callspec.params.get("engine_batch_size", default_batch) if callspec else default_batch
    inject = item.get_closest_marker("enginedead_inject")
    timeout = item.get_closest_marker("enginedead_timeout")
    try:
        if isinstance(batch, Exception) or batch is None:
            raise BadMarker(str(batch))
        faults = markers.inject(inject) if inject is not None else Injection()
        if timeout is not None:
            deadline, source = markers.timeout(timeout), "the enginedead_timeout marker"
        else:
            deadline = planning.policy_deadline(run.settings.policy, run.settings.policy_name, batch)
            source = f"policy {run.settings.policy_name}"
        server = "vllm_server" in getattr(item, "fixturenames", ())
        return Need(batch, Instructions(deadline, source, faults), _guard(item, run), server)
    except (BadMarker, PolicyFailure) as exc:
        return str(exc)


def _guard(item: pytest.Item, run: Run) -> GuardSpec | None:
    """The guard this test's engine runs with: its marker, else the run's option, else none."""
    marker = item.get_closest_marker("enginedead_guard")
    if marker is None and not run.settings.guard:
        return None
    hang_s, policy = markers.guard(marker) if marker is not None else (None, None)
    if policy is not None:
        try:
            load_policy(policy, [str(item.config.rootpath), os.getcwd()])
        except PolicyError as exc:
            raise BadMarker(f"@pytest.mark.enginedead_guard: policy={policy!r}: {exc}") from None
    return GuardSpec(hang_s or DEFAULT_HANG_S, policy or run.settings.policy_spec or "reference",
                     "the enginedead_guard marker" if marker is not None else run.settings.guard_where)


def _uses_factory(item: pytest.Item) -> bool:
    return any(f in getattr(item, "fixturenames", ()) for f in FACTORY_FIXTURES)


def _uses_engine(item: pytest.Item) -> bool:
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = _run(config)
    if run.settings.shard is not None:
        _keep_shard(config, run, items)
    plan = planning.plan(
        [_need(item, run) if _uses_engine(item) else _stray_markers(item) for item in items],
        run.settings.model, run.cpu_bind,
    )
    factories = [it for it in items if _uses_factory(it)]
    run.results.configurations = plan.configurations
    budget = config.pluginmanager.hasplugin("timeout")
    for item, test in zip(items, plan.tests, strict=True):
        if test is None:
            continue
        item.stash[plan_key] = test
        if budget and item.get_closest_marker("timeout") is None:
            _add_budget(item, test)
    items[:] = [items[i] for i in plan.order]
    engine_tests = len(plan.engine_specs) + len(factories)  # factories start the run's model too
    controller_checks = distributed.is_worker(config) and distributed.publish_groups(
        config, ((it.nodeid, distributed.item_group(it, _planned_spec(it))) for it in items),
        engine_tests=engine_tests,
    )
    if engine_tests and not controller_checks:  # under xdist the controller checks, once
        _check_model(config, run.settings)


def _keep_shard(config: pytest.Config, run: Run, items: list[pytest.Item]) -> None:
    """Keep this shard's tests (``--enginedead-shard``); the others are deselected.

    The engine configurations are planned without the worker's core budget, so every
    xdist worker and every machine deals the same collection the same way.
    """
    assert run.settings.shard is not None
    plan = planning.plan(
        [_need(item, run) if _uses_engine(item) else None for item in items], run.settings.model, None
    )
    keys = [t.spec if t is not None and t.spec is not None else None for t in plan.tests]
    nodeids = [it.nodeid for it in items]
    run.split = sharding.split(keys, nodeids, run.settings.shard, run.durations)
    run.results.shard = run.split.to_dict(nodeids)
    kept = set(run.split.keep)
    dropped = [it for i, it in enumerate(items) if i not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = [items[i] for i in run.split.keep]


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    run = config.stash.get(run_key, None)
    return f"enginedead: {run.split.describe()}" if run is not None and run.split is not None else None


def _check_model(config: pytest.Config, settings: Settings) -> None:
    """The model the planned engines run, checked once before the first starts: a UsageError."""
    with options.shown_whole_if_verbose(config):
        options.check_model(settings.model, settings.model_source)


def _add_budget(item: pytest.Item, test: TestPlan) -> None:
    """A pytest-timeout budget for an engine test that sets none: start-up plus its longest waits."""
    if test.instructions is None or test.spec is None:
        return
    cap = None
    if test.spec.guard is not None:  # a busy step may run up to the guard's cap
        with contextlib.suppress(PolicyError, PolicyFailure):
            policy = load_policy(test.spec.guard.policy, [str(item.config.rootpath), os.getcwd()])
            cap = planning.policy_deadline(policy, test.spec.guard.policy, test.batch_size)
    item.add_marker(pytest.mark.timeout(planning.budget_s(test.instructions, cap)))


def _planned_spec(item: pytest.Item) -> EngineSpec | None:
    test = item.stash.get(plan_key, None)
    return test.spec if test is not None else None


# --- running ----------------------------------------------------------------------------


def pytest_runtest_setup(item: pytest.Item) -> None:
    test = item.stash.get(plan_key, None)
    if test is not None and test.error:
        _fail(test.error)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    marker = item.get_closest_marker("enginedead_invariants")
    if marker is None:
        return (yield)
    try:
        req = markers.invariant_request(marker)
    except BadMarker as exc:
        _fail(str(exc))
    run = _run(item.config)
    handle = item.stash.get(handle_key, None)
    # with an engine and no given step times, headroom is judged on the steps it ran
    measured = handle is not None and req.step_times is None and "headroom" in req.names
    _judge_policy(run, [n for n in req.names if not (measured and n == "headroom")], req, req.step_times)
    result = yield
    if measured and handle is not None:
        _judge_policy(run, ["headroom"], req, worst_by_batch(handle.step_times()))
    return result


def _judge_policy(
    run: Run, names: list[str], req: markers.InvariantRequest, steps: dict[int, float] | Any
) -> None:
    if not names:
        return
    problems = invariants.violations(
        run.settings.policy, names, batch_sizes=run.settings.batch_sizes,
        cap_s=req.cap_s, headroom=req.headroom, step_times=steps,
    )
    if problems:
        pytest.fail(
            f"policy {run.settings.policy_name} breaks {len(problems)} invariant(s):\n"
            + "\n".join(f"  {p}" for p in problems),
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    handle = item.stash.get(handle_key, None)
    uses_engine = handle is not None or plan_key in item.stash or _uses_factory(item)
    _run(item.config).results.observe_time(uses_engine, rep.duration)
    if handle is not None:
        row = _run(item.config).results.observe(item.nodeid, rep, handle)
        if row is not None and rep.when == "call":
            # junitxml reads properties from the teardown report, made after this
            item.user_properties.extend(junit_properties(row))
    return rep


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    run = config.stash.get(run_key, None)
    if run is None:
        return
    records = run.pool.close()
    if run.pool.interrupted:  # Ctrl-C while the engines stopped: they all are; say so
        session.exitstatus = pytest.ExitCode.INTERRUPTED
        _terminal_line(config, "enginedead: interrupted while stopping engines; every engine was stopped")
    run.results.add_engines(records)
    if distributed.is_worker(config):
        distributed.send(config, run.results.to_wire())
    else:
        _write_outputs(session, run)
    survivors = [r.stop_error for r in records if r.stop_error]
    if survivors:
        raise RuntimeError(survivors[0])


def _write_outputs(session: pytest.Session, run: Run) -> None:
    """The JSON report and the durations, through the paths claimed at the start."""
    written: list[tuple[outputs.Output, str, Callable[[], str]]] = []
    if run.report is not None:
        written.append((run.report, "report", lambda: summary.report_json(run.results, run.settings)))
    if run.store is not None:
        durations = sharding.Durations(run.seconds, run.settings.vllm_version or sharding.NO_VLLM)
        written.append((run.store, "durations file", lambda: durations.to_json(this_machine())))
    for out, what, text in written:
        try:
            out.write_text(text())
        except outputs.OutputError as exc:  # proven writable at the start; it changed since
            sys.stderr.write(f"ERROR: enginedead: the {what} was not written: {exc}\n")
            session.exitstatus = pytest.ExitCode.USAGE_ERROR


def _terminal_line(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    run = config.stash.get(run_key, None)
    if run is not None:
        summary.terminal_summary(terminalreporter, run.results, run.settings.policy_name)


# --- fixtures ------------------------------------------------------------------------


@pytest.fixture
def enginedead_policy(pytestconfig: pytest.Config) -> PolicyLike:
    """The active timeout policy (``--enginedead-policy``, the hook, or the reference)."""
    return _run(pytestconfig).settings.policy


@pytest.fixture
def engine_batch_size(pytestconfig: pytest.Config) -> int:
    """The batch size this test's engine runs at (parametrized over the batch sizes)."""
    return _run(pytestconfig).settings.batch_sizes[0]


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
        _fail(str(exc))


def _handle(run: Run, engine: EngineBase, batch_size: int, instructions: Instructions) -> Handle:
    try:
        allowed: float | None = planning.policy_deadline(
            run.settings.policy, run.settings.policy_name, batch_size
        )
    except PolicyFailure:
        allowed = None  # the evidence then says nothing of the policy
    kind = ServerHandle if engine.spec.server else EngineHandle
    return kind(engine, batch_size, instructions, run.settings.policy_name, allowed, run.settings.liveness)


def _shared(request: pytest.FixtureRequest, batch_size: int) -> Iterator[Handle]:
    """The planned (shared) engine for this test, told its deadline and faults."""
    _require_vllm()
    run = _run(request.config)
    test = request.node.stash.get(plan_key, None)
    if test is None or test.spec is None or test.instructions is None:
        need = _need(request.node, run, batch_size)  # asked for outside collection's plan
        if isinstance(need, str):
            pytest.fail(need, pytrace=False)
        test = TestPlan(batch_size, planning.spec_for(need, run.settings.model, run.cpu_bind),
                        need.instructions)
    spec, instructions = test.spec, test.instructions
    assert spec is not None and instructions is not None
    engine = _started(lambda: run.pool.acquire(spec, instructions, request.node.nodeid))
    handle = _handle(run, engine, batch_size, instructions)
    request.node.stash[handle_key] = handle
    try:
        yield handle
    finally:
        run.pool.release(engine)


@pytest.fixture
def vllm_engine(request: pytest.FixtureRequest, engine_batch_size: int) -> Iterator[EngineHandle]:
    """A real vLLM CPU engine at ``engine_batch_size``, shared with tests of the same config."""
    for handle in _shared(request, engine_batch_size):
        assert isinstance(handle, EngineHandle)
        yield handle


@pytest.fixture
def vllm_server(request: pytest.FixtureRequest, engine_batch_size: int) -> Iterator[ServerHandle]:
    """vLLM's OpenAI-compatible API server at ``engine_batch_size`` (``--max-num-seqs``), shared."""
    for handle in _shared(request, engine_batch_size):
        assert isinstance(handle, ServerHandle)
        yield handle


def _factory_need(run: Run, batch_size: Any, timeout_s: Any, inject: Any, server: bool,
                  item: pytest.Item | None = None) -> Need:
    """What ``vllm_engine_factory(...)`` asks for; bad arguments fail the test in one line.

    The guard is the test's ``enginedead_guard`` marker's, else the run's option's.
    """
    __tracebackhide__ = True
    what = "vllm_server_factory" if server else "vllm_engine_factory"
    try:
        batch, seconds, faults = factory_arguments(batch_size, timeout_s, inject, what)
        if seconds is None:
            seconds = planning.policy_deadline(run.settings.policy, run.settings.policy_name, batch)
            source = f"policy {run.settings.policy_name}"
        else:
            source = f"{what}(timeout_s=...)"
    except BadMarker as exc:
        _fail(str(exc))
    except PolicyFailure as exc:
        _fail(f"{what}: {exc}")
    try:
        guard_spec = _guard(item, run) if item is not None else (
            GuardSpec(DEFAULT_HANG_S, run.settings.policy_spec or "reference", run.settings.guard_where)
            if run.settings.guard else None)
    except BadMarker as exc:
        _fail(str(exc))
    return Need(batch, Instructions(seconds, source, faults), guard_spec, server)


def _factory_model(model: Any, server: bool) -> str:
    """A factory's ``model=``: the same checks as every model door, or the test fails in one line."""
    __tracebackhide__ = True
    what = "vllm_server_factory" if server else "vllm_engine_factory"
    try:
        path = os.fsdecode(os.fspath(model))
    except TypeError:
        _fail(f"{what}: model={model!r} is not a path; give a model directory holding a config.json")
    problem = model_problem(path)
    if problem:
        _fail(f"{what}: model={model!r}: {problem}")
    return validate_model(path)


def _factory_spec(run: Run, need: Need, model: Any, engine_args: dict[str, Any], server: bool) -> EngineSpec:
    """The factory's engine; its engine (or server) arguments and model checked before it starts."""
    __tracebackhide__ = True
    what = "vllm_server_factory" if server else "vllm_engine_factory"
    try:
        factory_engine_args(what, engine_args, server)
    except BadMarker as exc:
        _fail(str(exc))
    model_dir = run.settings.model if model is None else _factory_model(model, server)
    spec = planning.spec_for(need, model_dir, run.cpu_bind)
    return replace(spec, extra_args=tuple(sorted(engine_args.items())))


def _factory(request: pytest.FixtureRequest, server: bool) -> Iterator[Callable[..., Any]]:
    _require_vllm()
    run = _run(request.config)
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
        need = _factory_need(run, batch_size, timeout_s, inject, server, request.node)
        spec = _factory_spec(run, need, model, engine_args, server)
        engine = _started(lambda: run.pool.start_dedicated(spec, need.instructions))
        made.append(engine)
        handle = _handle(run, engine, spec.max_num_seqs, need.instructions)
        request.node.stash[handle_key] = handle  # the report follows the latest one made
        return handle

    try:
        yield make
    finally:
        for engine in made:
            engine.stop()


@pytest.fixture
def vllm_engine_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., EngineHandle]]:
    """Start engines with explicit arguments; every engine it made is stopped afterwards.

    ``vllm_engine_factory(batch_size, timeout_s=None, inject=None, model=None, **engine_args)``
    """
    yield from _factory(request, server=False)


@pytest.fixture
def vllm_server_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., ServerHandle]]:
    """Start API servers with explicit arguments; every server it made is stopped afterwards.

    ``vllm_server_factory(batch_size, timeout_s=None, inject=None, model=None, **server_args)``
    (server arguments become ``--flags``).
    """
    yield from _factory(request, server=True)
