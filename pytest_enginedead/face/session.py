"""A run's life: its settings resolved and outputs claimed at the start, engines stopped and
files written at the end, the header and progress lines on the way.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..compat import versions
from ..contract.names import GUARD_ENV
from ..logic.inputs.modelconfig import BUNDLED_MODEL
from . import markerdocs, options
from .options import Settings
from .run import Run, run_key, run_of, run_settings

if TYPE_CHECKING:
    from ..harness import outputs
    from ..harness.threads import Progress
    from ..logic.planning import sharding


def configure_run(config: pytest.Config) -> None:
    for line in markerdocs.DOCS:
        config.addinivalue_line("markers", line)
    with options.shown_whole_if_verbose(config):
        settings = options.resolve_settings(config)
        claimed = store = None
        worker = hasattr(config, "workerinput")  # an xdist worker (``distributed.is_worker``)
        if not worker and (settings.report or settings.store_durations):
            from ..harness import outputs

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
        _check_ranks(config, settings)
    run = Run(settings, progress_writer(config), report=claimed, durations=durations, store=store)
    config.stash[run_key] = run
    run.scope.enter_context(run_settings(settings.liveness))
    config.pluginmanager.register(_Interrupted(run), "enginedead-interrupt")
    if store is not None:
        config.pluginmanager.register(_StoreDurations(run.seconds), "enginedead-durations")
    if worker or _distributing(config):
        from . import distributed

        run.cpu_bind = distributed.cpu_bind(config)
        if worker:
            config.pluginmanager.register(distributed.WorkerHooks(config), "enginedead-xdist-worker")
        else:
            from .collection import check_run_model

            controller = distributed.ControllerHooks(
                lambda: run.results, lambda **uses: check_run_model(config, settings, **uses),
                lambda: terminal_line(config, header(config)))
            config.pluginmanager.register(controller, "enginedead-xdist")


def _distributing(config: pytest.Config) -> bool:
    """xdist runs this session with workers (``-n N``, or a ``--dist`` mode): the controller's hooks."""
    if not config.pluginmanager.hasplugin("xdist"):
        return False
    option = config.option
    return (bool(getattr(option, "numprocesses", None)) or getattr(option, "dist", "no") != "no"
            or bool(getattr(option, "tx", None)))


def _check_ranks(config: pytest.Config, settings: Settings) -> None:
    """The run's ranks each get a core of those its engines may use (unless the user binds them),
    and spread evenly over its nodes."""
    if settings.nodes > 1:
        from ..compat.in_node import multi_node_problem
        from ..logic.planning.nodes import spread_problem

        problem = spread_problem(settings.tensor_parallel, settings.nodes) or multi_node_problem()
        if problem:
            raise pytest.UsageError(f"enginedead: {settings.nodes_where}: {problem}")
    if settings.tensor_parallel < 2:
        return
    from ..logic.planning.ranks import BIND_ENV, cores_problem
    from . import distributed

    if BIND_ENV in os.environ:
        return
    cores, owner = distributed.core_budget(config)
    problem = cores_problem(cores, settings.tensor_parallel, owner)
    if problem:
        raise pytest.UsageError(f"enginedead: {settings.tensor_parallel_where}: {problem}")


def _durations(settings: Settings) -> sharding.Durations | None:
    """The durations file the run was given, read and checked now: a UsageError if unusable."""
    if settings.durations is None:
        return None
    from ..logic.planning import sharding
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

    def __init__(self, run: Run) -> None:
        self.run = run

    def pytest_keyboard_interrupt(self) -> None:
        if self.run.has_pool:
            self.run.pool.hurry()


def unconfigure_run(config: pytest.Config) -> None:
    run = config.stash.get(run_key, None)
    if run is not None:
        run.scope.close()
        if run.has_pool:
            run.pool.close()
        for out in (run.report, run.store):
            if out is not None:
                out.close()
        if run.has_pool and run.pool.started:
            # an engine filled this process's heap with vLLM's and torch's objects (a
            # million and more): pytest collects garbage five times as it exits, and
            # walking them all took 1-2 s a time; they live until the exit anyway
            gc.freeze()
            atexit.register(_quiet_teardown)


def _quiet_teardown() -> None:
    """After pytest's last line: what libraries print while the interpreter tears down is not
    the run's.  With the heap frozen, nanobind reports triton's objects still alive as leaked
    (27 lines), and vLLM's client finalizer warns of the engine core the harness stopped;
    unfrozen, the same exit took 2.4-3.4 s instead of 0.5-0.8 s (measured 2026-12-04)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)


def header(config: pytest.Config) -> str:
    """The run's settings, said once its collection holds a test of the plugin's (``header_lines``)."""
    s = run_of(config).settings
    lines = [
        f"enginedead: policy={s.policy_name} ({s.policy_source}), "
        f"batch_sizes={','.join(map(str, s.batch_sizes))}, vllm={s.vllm_version or 'absent'}"
        + (f", model={s.model}" if s.model != BUNDLED_MODEL else "")
    ]
    if _distributing(config):
        from . import distributed

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


def collection_lines(config: pytest.Config) -> list[str]:
    """What follows pytest's "collected N items": the header when the collection holds a test of
    the plugin's (a run without one hears nothing of it), and the shard this run keeps."""
    run = config.stash.get(run_key, None)
    if run is None:
        return []
    lines = [header(config)] if run.plugin_tests else []
    if run.split is not None:
        lines.append(f"enginedead: {run.split.describe()}")
    return lines


def progress_writer(config: pytest.Config) -> Progress | None:
    """Progress lines on the terminal while an engine starts (in a fixture's setup, output
    captured), each on a line of its own, through pytest's terminal reporter with capture
    suspended (as pytest's live logging writes): pytest's row of results is ended before them and
    begun again after them (the file's path, then its dots and its [ 50%]), never broken."""
    if config.getoption("verbose") < 0 or hasattr(config, "workerinput"):
        return None  # xdist workers share the controller's terminal: keep it tidy
    try:
        fd = os.dup(2)  # without a terminal reporter (-p no:terminal): the terminal's stderr
    except OSError:
        return None
    config.add_cleanup(lambda: os.close(fd))
    lock = threading.Lock()  # the start's ticker thread and the test's own
    rows: list[object] = []  # pytest's row these lines interrupted, begun again after the last

    def write(message: str, done: bool = False) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            with lock, contextlib.suppress(OSError):
                os.write(fd, f"enginedead: {message}\n".encode())
            return
        capman = config.pluginmanager.get_plugin("capturemanager")
        suspended = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
        with lock, suspended:
            if reporter.currentfspath:
                rows.append(reporter.currentfspath)
            reporter.write_line(f"enginedead: {message}")  # ends pytest's row first
            if done and rows:
                _resume_row(reporter, rows.pop())
                rows.clear()
            reporter.flush()

    return write


def _resume_row(reporter: Any, row: object) -> None:
    """Begin pytest's row again as it was: the file's path before its dots, or (``-v``) the test's
    location before its PASSED."""
    if isinstance(row, Path):
        reporter.write(f"{os.path.relpath(row, reporter.startpath)} ")
    elif isinstance(row, str):
        reporter.write(row)
    else:
        return
    reporter.currentfspath = row


def finish_session(session: pytest.Session) -> None:
    config = session.config
    run = config.stash.get(run_key, None)
    if run is None:
        return
    records = run.pool.close() if run.has_pool else []
    if run.has_pool and run.pool.interrupted:  # Ctrl-C while the engines stopped: they all are; say so
        session.exitstatus = pytest.ExitCode.INTERRUPTED
        terminal_line(config, "enginedead: interrupted while stopping engines; every engine was stopped")
    if records:
        run.results.add_engines(records)
    if hasattr(config, "workerinput"):
        from . import distributed

        distributed.send(config, run.results.to_wire())
    else:
        write_outputs(session, run)
    if run.results.survivors() and session.exitstatus == pytest.ExitCode.OK:  # the summary names them
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def write_outputs(session: pytest.Session, run: Run) -> None:
    """The JSON report and the durations, through the paths claimed at the start."""
    if run.report is None and run.store is None:
        return
    from ..harness import outputs
    from ..logic.machine import this_machine
    from ..logic.planning import sharding
    from . import summary

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


def terminal_line(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
