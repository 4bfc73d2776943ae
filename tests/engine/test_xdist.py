"""Under pytest-xdist: engines per worker, one config per worker, one merged report."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import psutil
import pytest

from pytest_enginedead.harness.waiting import wait_until
from tests.support import examples
from tests.support.downstream import (
    TWO_WORKERS,
    TWO_WORKERS_PLUGINS,
    Downstream,
    assert_nothing_left,
    engine_processes,
    left_in_temp,
)

pytestmark = pytest.mark.engine


@pytest.mark.xdist_group("xdist_suite")  # one run for both tests (Downstream.shared_run)
def test_two_workers_one_report(downstream: Downstream, bystander: psutil.Process) -> None:
    """-n 2 --dist loadgroup: outcomes as without xdist, engines = configurations,
    both workers used, one merged table and JSON report, nothing left behind.  (The suite's
    guarded crash also holds the guard's: DEAD, as quick as without the guard.)"""
    result = downstream.copy(examples.XDIST_SUITE).shared_run(*TWO_WORKERS, plugins=TWO_WORKERS_PLUGINS)
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert out.count("engines started: 2;") == 1, out[-3000:]
    assert "--dist" not in out.split("collected")[0]  # no loadgroup warning in the header
    data = result.report
    assert data is not None
    assert data["engines_started"] == 2 == data["configurations"]
    assert {e["worker"] for e in data["engines"]} == {"gw0", "gw1"}
    assert sum(e["false_deaths"] for e in data["engines"]) == 1
    assert sum(e["genuine_deaths"] for e in data["engines"]) == 1
    assert len([t for t in data["tests"] if t["when"] == "call"]) == 4
    assert_nothing_left(*engine_processes(data), bystander)


def test_killed_worker_leaves_no_engine(
    downstream: Downstream, bystander: psutil.Process, request: pytest.FixtureRequest
) -> None:
    """SIGKILL the xdist worker in mid-step: the controller survives and reports the
    crash; the worker's reaper ends its engine processes and removes what they left in
    the temp dir."""
    scratch = Path(tempfile.mkdtemp(prefix="ed-"))  # short: vLLM's sockets go under it
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    run = downstream.copy(examples.LONG_STEP_UNDER_XDIST).start(
        "-n", "2", "--dist", "loadgroup", plugins=["xdist"], env={"TMPDIR": str(scratch)}
    )
    marker = run.path / "generating"

    def xdist_worker() -> int | None:
        """The xdist worker running the step (it wrote its pid into the marker)."""
        text = marker.read_text().strip()
        return int(text) if text else None

    run.watch(extra_s=2, under=xdist_worker)
    worker = xdist_worker()
    assert worker is not None
    psutil.Process(worker).kill()
    code = run.wait(timeout=180)
    out = run.output()
    assert "crashed" in out and code == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert_nothing_left(run.seen, run.shm, bystander, within_s=20, require_shm=True, context=out[-3000:])
    # the reaper removes the run dir after the processes
    wait_until(lambda: not left_in_temp(scratch), 5.0)
    assert not left_in_temp(scratch), out[-3000:]
