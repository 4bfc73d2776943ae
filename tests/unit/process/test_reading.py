"""One reading of a process, on real processes: a busy loop, a sleeper, one that exited."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from pytest_enginedead.contract.decisions import BUSY_CORES, busy
from pytest_enginedead.process import reading
from tests.support.procs import wait_until_idle

SPIN = "while True: pass"


def started(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.fixture
def parent_of_a_busy_child() -> Iterator[tuple[psutil.Process, psutil.Process]]:
    """An idle parent whose one child computes (a worker and its compiler)."""
    proc = started(f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {SPIN!r}])\n"
                   "time.sleep(60)")
    parent = psutil.Process(proc.pid)
    try:
        deadline = time.monotonic() + 10
        while not parent.children():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield parent, parent.children()[0]
    finally:
        for p in (*parent.children(recursive=True), parent):
            p.kill()
        proc.wait()


def test_a_busy_child_is_its_idle_parents_work(
    parent_of_a_busy_child: tuple[psutil.Process, psutil.Process],
) -> None:
    parent, child = parent_of_a_busy_child
    parent_cores, child_cores = reading.look([parent, child], 0.5)
    assert busy(parent_cores) and busy(child_cores)
    assert parent_cores >= 0.5 * child_cores  # the child's CPU is the parent's
    # judged apart, the child's CPU is its own only
    alone = reading.cpu_seconds(parent, apart={child.pid})
    time.sleep(0.3)
    assert reading.cpu_seconds(parent, apart={child.pid}) - alone < BUSY_CORES * 0.3 + 0.02


def test_a_sleeper_is_idle_and_alive() -> None:
    proc = started("import time; time.sleep(60)")
    try:
        sleeper = psutil.Process(proc.pid)
        assert reading.alive(sleeper)
        wait_until_idle(proc.pid)  # past its interpreter's start
        (cores,) = reading.look([sleeper], 0.3)
        assert not busy(cores)
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_exited_is_gone_and_a_zombie_is_not_alive() -> None:
    proc = started("pass")
    exited = psutil.Process(proc.pid)
    deadline = time.monotonic() + 10
    while reading.status(exited) != psutil.STATUS_ZOMBIE:  # exited, not reaped yet
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert not reading.alive(exited)
    proc.wait()
    assert reading.status(exited) == reading.GONE and not reading.alive(exited)
    assert reading.cpu_seconds(exited) == 0.0


def test_cores_between_two_readings() -> None:
    assert reading.cores_between([1.0, 2.0], [1.5, 2.0], 0.5) == [1.0, 0.0]
    assert reading.cores_between([1.0], [0.5], 1.0) == [0.0]  # never negative
    assert reading.cores_between([1.0], [2.0], 0.0) == [0.0]


def test_a_cpu_trail_measures_over_the_last_window() -> None:
    trail = reading.CpuTrail(window_s=1.0)
    assert trail.span_s == 0.0
    trail.add(0.0, [0.0, 5.0])
    assert trail.span_s == 0.0 and trail.cores() == [0.0, 0.0]
    for i in range(1, 9):  # process 0 computes for the first second, then sleeps; 1 always computes
        trail.add(i * 0.25, [min(i * 0.25, 1.0), 5.0 + i * 0.25])
    assert trail.span_s == pytest.approx(1.0)
    assert trail.cores() == pytest.approx([0.0, 1.0])  # the last second only
    trail.add(2.5, [1.0])  # another set of processes: a trail of its own
    assert trail.span_s == 0.0
