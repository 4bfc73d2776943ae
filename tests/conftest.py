"""Shared fixtures: a downstream repo (``downstream``) and a bystander ``VLLM::Worker``.

The helpers behind them live in ``support/downstream.py``; ``examples/`` holds the downstream
suites (copied into ``pytester`` directories, never collected here).  Every engine the
suite's runs start, inner runs and commands included, goes to one start ledger
(``pytest_enginedead.harness.engines.ledger``), totalled at the end of the run and held to the engine
suite's budget (``tests/engine_budget.py``): a start it does not allow fails the run.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

# the support modules' asserts report like the tests' own (before any of them is imported)
pytest.register_assert_rewrite("tests.support")

from pytest_enginedead.contract.names import START_LEDGER_ENV, START_LEDGER_TAG_ENV  # noqa: E402
from pytest_enginedead.harness.engines import ledger  # noqa: E402
from tests import engine_budget  # noqa: E402
from tests.support.downstream import Downstream  # noqa: E402

collect_ignore = ["examples"]

#: the start ledger this run made (on the controller, or alone; xdist workers inherit it)
ledger_key = pytest.StashKey[str]()


@pytest.fixture
def downstream(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[Downstream]:
    """A downstream repo whose runs load only what it names (``-p enginedead``), with no
    ``ENGINEDEAD_*`` settings from our own environment."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    for name in list(os.environ):
        if name.startswith("ENGINEDEAD_") and name not in (START_LEDGER_ENV, START_LEDGER_TAG_ENV):
            monkeypatch.delenv(name)
    repo = Downstream(pytester)
    yield repo
    repo.close()


def pytest_configure(config: pytest.Config) -> None:
    """One start ledger for the whole run, unless the caller keeps their own.  Under xdist the
    work goes out in the order ``pytest_collection_modifyitems`` gives (the longest groups
    first), not xdist's own reordering of groups by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if hasattr(config, "workerinput") or os.environ.get(START_LEDGER_ENV):
        return
    fd, path = tempfile.mkstemp(prefix="enginedead-ledger-", suffix=".jsonl")
    os.close(fd)
    os.environ[START_LEDGER_ENV] = path
    config.stash[ledger_key] = path


#: the starts of this run that the engine suite's budget (``tests/engine_budget.py``) does not allow
over_budget_key = pytest.StashKey[list[str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A run whose engine tests started what ``tests/engine_budget.py`` does not name fails."""
    path = session.config.stash.get(ledger_key, None)
    problems = engine_budget.ledger_problems(ledger.read(path)) if path else []
    session.config.stash[over_budget_key] = problems
    if problems and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    path = config.stash.get(ledger_key, None)
    lines = ledger.summary(ledger.read(path)) if path else []
    if lines:
        terminalreporter.section("engine starts of this run and the runs inside it")
        for line in lines:
            terminalreporter.write_line(line)
    problems = config.stash.get(over_budget_key, [])
    if problems:
        terminalreporter.section("engine starts over the budget (tests/engine_budget.py)", red=True)
        for line in problems:
            terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(ledger_key, None)
    if path:
        os.environ.pop(START_LEDGER_ENV, None)
        with contextlib.suppress(OSError):
            os.unlink(path)


#: the pinned release's recorded durations (what ``make test`` runs the suite against)
DURATIONS = Path(__file__).resolve().parents[1] / "durations" / "vllm0320.json"


def _group(item: pytest.Item) -> str:
    """What one xdist worker runs whole: the test's ``xdist_group``, else the test alone."""
    marks = [str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args]
    return marks[0] if marks else item.nodeid.split("@")[0]


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup adds "@group" to the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest groups first (a group's recorded tests added up; an engine test without a
    record counts as the median engine test), so that no xdist worker is left with one long group
    while the other idles; a group's tests stay together, in their order; the rest after them."""
    try:
        seconds = {k.split("@")[0]: float(v) for k, v in json.loads(DURATIONS.read_text())["tests"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return
    engine = sorted(v for k, v in seconds.items() if k.startswith("tests/engine/"))
    unknown_engine = engine[len(engine) // 2] if engine else 0.0

    def recorded(item: pytest.Item) -> float:
        nodeid = item.nodeid.split("@")[0]
        if nodeid in seconds:
            return seconds[nodeid]
        return unknown_engine if item.get_closest_marker("engine") else 0.0

    totals: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        group = _group(item)
        totals[group] = totals.get(group, 0.0) + recorded(item)
        first.setdefault(group, i)
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-totals[_group(item)], first[_group(item)], order[id(item)]))


@pytest.fixture(autouse=True)
def _starts_name_their_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger names the test of ours that an inner run's engine was started for."""
    monkeypatch.setenv(START_LEDGER_TAG_ENV, request.node.nodeid)


@pytest.fixture(scope="session", autouse=True)
def _inner_runs_share_our_cores(pytestconfig: pytest.Config) -> None:
    """Under xdist, the downstream runs our tests start use this worker's cores only.

    The inner runs are not xdist workers themselves, so they would not split the
    machine; give them the worker's share the way the plugin gives its own engines.
    """
    from pytest_enginedead.pytest_plugin.distributed import cpu_bind

    cores = cpu_bind(pytestconfig)
    if cores is not None and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cores


#: prctl(2)'s option that has the kernel signal a child when its parent dies (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before it execs: killed when the test process dies, even by SIGKILL or a broken
    pipe, where the fixture's teardown never runs (the signal holds across exec)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@pytest.fixture(scope="session")
def bystander() -> Iterator[psutil.Process]:
    """A process titled like a vLLM worker that no harness started: it must survive (and it dies
    with the test process, whatever ends that)."""
    proc = subprocess.Popen(["bash", "-c", "exec -a VLLM::Worker sleep 3600"], preexec_fn=_die_with_parent)
    try:
        bystander = psutil.Process(proc.pid)
        deadline = time.monotonic() + 10
        while bystander.cmdline()[:1] != ["VLLM::Worker"]:  # until bash has exec'd
            assert time.monotonic() < deadline, bystander.cmdline()
            time.sleep(0.01)
        yield bystander
    finally:
        proc.kill()
        proc.wait()
