"""Parametrize the regression suite from ``enginedead check``'s plan, and report progress.

Each batch size runs under the stock deadline and the policy (and the guard, when
asked), on an offline engine or through the API server; one progress event per
run goes to the file the command follows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator

import pytest

from pytest_enginedead.contract.names import CHECK_PROGRESS_ENV
from pytest_enginedead.contract.steps import summarize
from pytest_enginedead.harness.waiting import Progress
from pytest_enginedead.logic.reporting.checkevents import Event, Note, RunDone, event_line
from pytest_enginedead.logic.reporting.checking import CheckMode, CheckPlan, run_result
from pytest_enginedead.pytest_plugin.run import handle_key, run_key, settings_of

_started = time.monotonic()


@pytest.hookimpl(trylast=True)  # after the plugin made the run's pool
def pytest_configure(config: pytest.Config) -> None:
    """Engine starts are news to the command too: each start's lines (starting, still starting,
    ready) go to its progress file as notes, so it is never silent for the half-minute a start takes."""
    path = os.environ.get(CHECK_PROGRESS_ENV)
    run = config.stash.get(run_key, None)
    if path and run is not None:
        run.pool.progress = _note_writer(path)


def _write(path: str, event: Event) -> None:
    with open(path, "a") as f:
        f.write(event_line(event))


def _note_writer(path: str) -> Progress:
    def note(message: str, done: bool = False) -> None:
        _write(path, Note(message, time.monotonic() - _started))

    return note


@pytest.fixture(scope="session")
def check_plan(pytestconfig: pytest.Config) -> CheckPlan:
    s = settings_of(pytestconfig)
    return CheckPlan.from_env(os.environ, s.model, s.batch_sizes)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "check_mode" not in metafunc.fixturenames:
        return
    s = settings_of(metafunc.config)
    plan = CheckPlan.from_env(os.environ, s.model, s.batch_sizes)
    slow = plan.slow_s_per_seq
    inject = [pytest.mark.enginedead_inject(slow_s_per_seq=slow)] if slow else []
    stock = pytest.mark.enginedead_timeout(plan.stock_s)
    marks = {
        CheckMode.STOCK: [stock, *inject],
        CheckMode.POLICY: inject,
        CheckMode.GUARD: [stock, pytest.mark.enginedead_guard(), *inject],
        # the spin begins at the run's second step: its first warms the engine up
        CheckMode.SPIN: [pytest.mark.enginedead_timeout(plan.spin_deadline_s),
                         pytest.mark.enginedead_inject(spin_at_step=2)],
    }
    metafunc.parametrize("check_mode", [pytest.param(m, marks=marks[m], id=m.value) for m in plan.modes])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Offline engines or the API server, as the plan says: the other kind is deselected."""
    s = settings_of(config)
    plan = CheckPlan.from_env(os.environ, s.model, s.batch_sizes)
    unwanted = "vllm_engine" if plan.server else "vllm_server"
    dropped = [it for it in items if unwanted in getattr(it, "fixturenames", ())]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [it for it in items if it not in dropped]


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    path = os.environ.get(CHECK_PROGRESS_ENV)
    handle = item.stash.get(handle_key, None)
    callspec = getattr(item, "callspec", None)
    mode = callspec.params.get("check_mode") if callspec is not None else None
    if path and isinstance(mode, CheckMode) and (rep.when == "call" or (rep.failed and rep.when == "setup")):
        stats = summarize(handle.step_times_since_start(), now=time.monotonic()) if handle else None
        verdict = handle.findings[-1].verdict if handle and handle.findings else None
        _write(path, RunDone(
            handle.batch_size if handle else 0, mode, run_result(verdict, rep.outcome),
            stats.steps if stats else 0, stats.max_s if stats else None, rep.duration,
            time.monotonic() - _started,
        ))
    return rep
