"""A pytest plugin for the suite's budget (``bench/budget.py``): when each test ran, on which worker.

``pytest -p tests.support.timeline --budget-timeline=FILE`` writes one JSON line per test phase
(setup, call, teardown) with its outcome, duration, wall-clock start and stop, and the xdist
worker that ran it (``main`` without xdist), plus a first and a last line with the run's own
wall clock.  Under xdist only the controller writes (it sees every worker's reports), so the
lines never interleave.  Without the option the plugin does nothing.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

_path = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--budget-timeline", default=None, metavar="FILE",
                     help="write each test phase's worker, start, stop and outcome here (JSON lines)")


def _write(config: pytest.Config, entry: dict[str, Any]) -> None:
    path = config.stash.get(_path, None)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--budget-timeline")
    if path and not hasattr(config, "workerinput"):  # the controller, or a run without xdist
        config.stash[_path] = path
        open(path, "w").close()
        _write(config, {"event": "start", "t": time.time()})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _CONFIG.get("config")
    if config is None:
        return
    node = getattr(report, "node", None)
    worker = node.workerinput["workerid"] if node is not None else "main"
    _write(config, {
        "event": "phase", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
        "duration": round(report.duration, 3), "start": getattr(report, "start", None),
        "stop": getattr(report, "stop", None), "worker": worker,
    })


_CONFIG: dict[str, pytest.Config] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG["config"] = session.config


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write(session.config, {"event": "finish", "t": time.time(), "exitstatus": int(exitstatus)})
    _CONFIG.pop("config", None)
