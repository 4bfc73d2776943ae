"""Liveness on real processes: busy → SLOW, sleeping → HUNG, exited or zombie → DEAD."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from pytest_enginedead import Verdict
from pytest_enginedead.contract.decisions import BUSY_CORES, overall
from pytest_enginedead.harness.liveness import ProcessEvidence, Sampler, Watched, classify, snapshot
from tests.support import procs


@pytest.fixture
def busy() -> Iterator[int]:
    """A worker computing flat out for 30 s (killed after the test), once it computes."""
    with procs.worker("busy", 30.0) as proc:
        procs.wait_for_cpu(proc.pid)
        yield proc.pid


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A worker asleep for 30 s (killed after the test), once it has finished starting."""
    with procs.worker("idle", 30.0) as proc:
        procs.wait_until_idle(proc.pid)
        yield proc.pid


def evidence_over(pids: list[int], seconds: float = 0.6) -> dict[int, ProcessEvidence]:
    """Sample ``pids`` in the background for ``seconds``, then take the evidence."""
    with Sampler(pids, interval_s=0.05, window_s=0.5) as sampler:
        time.sleep(seconds)
        return sampler.evidence()


def ev(alive: bool = True, cores: float = 0.0, status: str = "running") -> ProcessEvidence:
    """Evidence as if measured, for the pure decision rules."""
    return ProcessEvidence(4242, "VLLM::Worker", alive, status, cores, 1.0, 2**20, 0.0)


# --- real processes ---------------------------------------------------------------------


def test_busy_process_is_slow(busy: int) -> None:
    """A Python busy loop uses most of a core and is classified SLOW."""
    e = evidence_over([busy])[busy]
    assert e.alive and e.pid == busy
    assert e.cpu_cores > 2 * BUSY_CORES, e.describe()
    assert e.window_s >= 0.45
    assert classify(e) is Verdict.SLOW


def test_sleeping_process_is_hung(sleeper: int) -> None:
    """An alive process at ~0 CPU is below the 0.05 threshold: HUNG, not SLOW."""
    e = evidence_over([sleeper])[sleeper]
    assert e.alive and e.status == psutil.STATUS_SLEEPING
    assert e.cpu_cores < BUSY_CORES, e.describe()
    assert classify(e) is Verdict.HUNG


def test_exited_and_reaped_process_is_dead() -> None:
    """A process that exited and was reaped is gone: DEAD."""
    with procs.worker("exit") as proc:
        sampler = Sampler([proc.pid], interval_s=0.05)
        sampler.sample_now()
        proc.wait(timeout=10)
        e = sampler.evidence()[proc.pid]
    assert not e.alive and e.status == "gone"
    assert classify(e) is Verdict.DEAD


def test_zombie_process_is_dead() -> None:
    """A process that exited but was not yet reaped (a zombie) is DEAD, not HUNG."""
    with procs.worker("exit") as proc:
        sampler = Sampler([proc.pid], interval_s=0.05)
        sampler.sample_now()
        deadline = time.monotonic() + 10
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        e = sampler.evidence()[proc.pid]
        assert not e.alive and e.status in (psutil.STATUS_ZOMBIE, "gone")
        assert classify(e) is Verdict.DEAD


def test_a_gone_process_keeps_what_it_did_before_it_went() -> None:
    """Once gone, its history stops, and the evidence as of a moment before it went still
    shows it computing, however long the sampler runs on (vLLM stops its workers after a
    death, and a server's clients hear of the death seconds later)."""
    with procs.worker("busy", 30.0) as proc:
        procs.wait_for_cpu(proc.pid)
        sampler = Sampler([proc.pid], interval_s=0.02, window_s=1.0).start()
        time.sleep(1.2)  # a whole window of it computing
        busy_at = time.monotonic()
        proc.kill()
        proc.wait(timeout=10)
        time.sleep(1.0)
        now = sampler.evidence()[proc.pid]
        then = sampler.evidence_at(proc.pid, busy_at)
        held = len(sampler.watched[proc.pid].samples)
        time.sleep(0.3)
        sampler.stop()
        assert len(sampler.watched[proc.pid].samples) == held  # gone: no more samples
    assert classify(now) is Verdict.DEAD
    assert then is not None and then.alive and then.at <= busy_at, then
    assert classify(then) is Verdict.SLOW, then.describe()
    assert then.window_s >= 0.95
    assert sampler.evidence_at(proc.pid, busy_at - 10) is None  # before its first sample
    assert Sampler([proc.pid]).evidence_at(proc.pid + 10**7, busy_at) is None  # not watched


def test_pid_that_never_existed_is_dead() -> None:
    """A pid with no process is DEAD from the first sample, and named by its pid."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=10)  # its pid is now free
    e = Sampler([proc.pid]).evidence()[proc.pid]
    assert not e.alive and e.title == f"pid {proc.pid}"
    assert classify(e) is Verdict.DEAD


def test_process_is_pinned_by_creation_time(sleeper: int) -> None:
    """A pid now owned by another process (other creation time) reads as gone."""
    watched = Watched(sleeper, history=8)
    assert watched.sample().alive
    assert watched.proc is not None
    if not hasattr(watched.proc, "_ident"):
        pytest.skip("this psutil does not keep (pid, creation time) as _ident")
    # what psutil sees after the pid is reused: same pid, a different creation time
    pid, created = watched.proc._ident
    watched.proc._ident = (pid, created - 1000.0)
    s = watched.sample()
    assert not s.alive and s.status == "gone"
    assert classify(watched.evidence(1.0)) is Verdict.DEAD


def test_sampler_reports_each_process(busy: int, sleeper: int) -> None:
    """One sampler, two processes: each gets its own evidence and verdict."""
    found = evidence_over([busy, sleeper, busy])  # duplicates are watched once
    assert list(found) == [busy, sleeper]
    assert classify(found[busy]) is Verdict.SLOW
    assert classify(found[sleeper]) is Verdict.HUNG
    assert overall(classify(e) for e in found.values()) is Verdict.SLOW


def test_snapshot_without_a_thread(busy: int, sleeper: int) -> None:
    """``snapshot`` takes a short window without starting a sampler thread."""
    found = snapshot([busy, sleeper], window_s=0.3)
    assert classify(found[busy]) is Verdict.SLOW
    assert classify(found[sleeper]) is Verdict.HUNG


def test_sampler_thread_stops(sleeper: int) -> None:
    """Leaving the sampler's ``with`` stops its daemon thread."""
    with Sampler([sleeper], interval_s=0.05) as sampler:
        thread = sampler._thread
        assert thread is not None and thread.is_alive() and thread.daemon
    assert not thread.is_alive()


def test_evidence_describes_the_process(busy: int) -> None:
    """The description names title, pid, state and CPU share, for failure messages."""
    e = evidence_over([busy], 0.3)[busy]
    text = e.describe()
    assert f"(pid {busy})" in text and "procs.py busy" in text
    assert "% of a core over the last" in text
    assert e.title.endswith("procs.py busy")


def test_this_process_is_alive() -> None:
    """The test process itself is alive (sanity of the status mapping)."""
    e = Sampler([os.getpid()]).evidence()[os.getpid()]
    assert e.alive and classify(e) is not Verdict.DEAD


# --- the decision rules ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "threshold", "expected"),
    [
        (0.0, BUSY_CORES, Verdict.HUNG),
        (0.049, BUSY_CORES, Verdict.HUNG),
        (0.05, BUSY_CORES, Verdict.SLOW),
        (1.0, BUSY_CORES, Verdict.SLOW),
        (0.3, 0.5, Verdict.HUNG),
        (0.6, 0.5, Verdict.SLOW),
    ],
)
def test_threshold_is_respected(cores: float, threshold: float, expected: Verdict) -> None:
    """Alive and at or above the threshold is SLOW; below it is HUNG."""
    assert classify(ev(cores=cores), threshold) is expected


def test_gone_is_dead_whatever_its_cpu() -> None:
    """A gone process is DEAD even if its last window showed it computing."""
    assert classify(ev(alive=False, cores=2.0, status="zombie")) is Verdict.DEAD


def test_sampler_rejects_a_non_positive_interval() -> None:
    """An interval of 0 would spin; it is refused."""
    with pytest.raises(ValueError, match="sample interval must be > 0"):
        Sampler([os.getpid()], interval_s=0)
