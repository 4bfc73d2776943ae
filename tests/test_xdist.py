"""Under pytest-xdist: engines per worker, one config per worker, one merged report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_enginedead import compat
from pytest_enginedead.cleanup import ProcRef, mapped_shm
from pytest_enginedead.distributed import cpu_bind

pytestmark = pytest.mark.skipif(compat.installed_version() is None, reason="vLLM is not installed")


class _Config:
    """Just enough of pytest.Config for cpu_bind."""

    def __init__(self, workerid: str | None, count: int) -> None:
        if workerid is not None:
            self.workerinput = {"workerid": workerid, "workercount": count}


@pytest.mark.parametrize(
    ("workerid", "count", "cpus", "expected"),
    [
        (None, 0, [0, 1], None),  # not under xdist: vLLM decides
        ("gw0", 2, [0, 1], "0"),
        ("gw1", 2, [0, 1], "1"),
        ("gw1", 2, [0, 1, 2, 3], "2,3"),
        ("gw2", 3, [0, 1], "0"),  # more workers than cores: round-robin
        ("gw0", 1, [4, 5], "4,5"),
    ],
)
def test_each_worker_gets_its_own_cores(workerid, count, cpus, expected) -> None:
    assert cpu_bind(_Config(workerid, count), cpus) == expected  # type: ignore[arg-type]


SUITE = """
import pytest
from pytest_enginedead import assert_no_false_death, Verdict


@pytest.mark.enginedead_batch_sizes(2, 64)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.05)
def test_stock_deadline(vllm_engine):
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=4)


@pytest.mark.enginedead_batch_sizes(8)
def test_policy(vllm_engine):
    with assert_no_false_death(vllm_engine):
        assert len(vllm_engine.generate(max_tokens=4)) == 8


@pytest.mark.enginedead_batch_sizes(4)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(crash_at_step=2)
def test_crash(vllm_engine):
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_engine):
            vllm_engine.generate(max_tokens=8)
    assert type(info.value).__name__ == "EngineDeadError"
    assert vllm_engine.deaths[-1]["verdict"] == Verdict.DEAD.name
"""


@pytest.mark.engine
def test_two_workers_one_report(pytester: pytest.Pytester) -> None:
    """-n 2 --dist loadgroup: outcomes as without xdist, engines = configurations,
    both workers used, one merged table and JSON report, nothing left behind."""
    pytester.makepyfile(test_downstream=SUITE)
    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess(
        "-p", "enginedead", "-p", "timeout", "-p", "xdist", "-n", "2", "--dist", "loadgroup",
        f"--enginedead-report={report}", timeout=600,
    )
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert out.count("engines started: 3;") == 1, out[-3000:]
    assert "--dist" not in out.split("collected")[0]  # no loadgroup warning in the header
    data = json.loads(report.read_text())
    assert data["engines_started"] == 3 == data["configurations"]
    assert {e["worker"] for e in data["engines"]} == {"gw0", "gw1"}
    assert sum(e["false_deaths"] for e in data["engines"]) == 1
    assert sum(e["genuine_deaths"] for e in data["engines"]) == 1
    assert len([t for t in data["tests"] if t["when"] == "call"]) == 4
    for engine in data["engines"]:
        for ref in engine["pids"]:
            assert ProcRef(ref["pid"], ref["create_time"]).process() is None
        assert not [p for p in engine["shm"] if os.path.exists(p)]


def test_header_says_when_dist_is_not_loadgroup(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_a():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "enginedead", "-p", "xdist", "-n", "2")
    result.stdout.fnmatch_lines(["enginedead: --dist load: *use --dist loadgroup"])


LONG_STEP = """
import pathlib
import pytest


@pytest.mark.enginedead_batch_sizes(8)
@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)
def test_long_step(vllm_engine):
    pathlib.Path("generating").write_text(str(__import__("os").getpid()))
    vllm_engine.generate(max_tokens=4)


def test_other():
    pass
"""


@pytest.mark.engine
def test_killed_worker_leaves_no_engine(tmp_path: Path) -> None:
    """SIGKILL the xdist worker in mid-step: the controller survives and reports the
    crash; the worker's reaper ends its engine processes."""
    (tmp_path / "test_downstream.py").write_text(LONG_STEP)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    log = open(tmp_path / "log.txt", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "enginedead", "-p", "xdist", "-p", "no:cacheprovider",
         "-n", "2", "--dist", "loadgroup"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    seen: set[ProcRef] = set()
    shm: set[str] = set()
    try:
        deadline = time.monotonic() + 240
        marker = tmp_path / "generating"
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert marker.exists(), (tmp_path / "log.txt").read_text()
        time.sleep(2)
        worker = psutil.Process(int(marker.read_text()))
        for kid in worker.children(recursive=True):
            seen.add(ProcRef.of(kid))
        shm = mapped_shm(seen)
        assert any("VLLM::Worker" in " ".join(ProcRef.process(r).cmdline()) for r in seen if r.process())
        worker.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    out = (tmp_path / "log.txt").read_text()
    assert "crashed" in out and code == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    limit = time.monotonic() + 20
    while any(r.process() for r in seen) and time.monotonic() < limit:
        time.sleep(0.25)
    assert not [r for r in seen if r.process()], "engine processes outlived the killed worker"
    assert shm and not [p for p in shm if os.path.exists(p)]
