"""Nothing left behind: a run cut short in mid-step still ends its own engine processes.

A downstream run is started in its own session, its engine process tree and their
``/dev/shm`` segments are recorded while a step runs, then the run is cut: Ctrl-C
(SIGINT to the process group), pytest-timeout, or SIGKILL of pytest itself (the
reaper's job).  Afterwards every recorded process and segment must be gone, and a
decoy titled ``VLLM::Worker`` that the harness did not start must still be alive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pytest_enginedead import compat
from pytest_enginedead.cleanup import ProcRef, mapped_shm

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(compat.installed_version() is None, reason="vLLM is not installed"),
]

LONG_STEP = """
import pathlib
import pytest


@pytest.mark.enginedead_batch_sizes(8)
@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)  # 16 s steps, far inside the policy
def test_long_step(vllm_engine):
    pathlib.Path("generating").write_text("now")
    vllm_engine.generate(max_tokens=4)
"""

HANG = """
import pathlib
import pytest


@pytest.mark.enginedead_batch_sizes(4)
@pytest.mark.enginedead_inject(hang_at_step=2)
@pytest.mark.timeout(6)
def test_hangs_until_cut(vllm_engine):
    pathlib.Path("generating").write_text("now")
    vllm_engine.generate(max_tokens=8)
"""


class Downstream:
    """``pytest -p enginedead`` in a directory of its own, in a session of its own."""

    def __init__(self, path: Path, source: str, *args: str) -> None:
        self.path = path
        (path / "test_downstream.py").write_text(source)
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        self.log = open(path / "pytest.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "enginedead", "-p", "timeout",
             "-p", "no:cacheprovider", *args],
            cwd=path, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.seen: set[ProcRef] = set()
        self.shm: set[str] = set()

    def watch_until_generating(self, extra_s: float, limit_s: float = 240) -> None:
        """Record the run's process tree until the test has been generating ``extra_s``."""
        deadline = time.monotonic() + limit_s
        started: float | None = None
        while time.monotonic() < deadline:
            self._record()
            if started is None and (self.path / "generating").exists():
                started = time.monotonic()
            if started is not None and time.monotonic() - started >= extra_s:
                assert any(self._title(r).startswith("VLLM::Worker") for r in self.seen)
                return
            if self.proc.poll() is not None:
                pytest.fail(f"downstream run ended early:\n{self.output()}")
            time.sleep(0.2)
        pytest.fail(f"the downstream test never started generating:\n{self.output()}")

    def _record(self) -> None:
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for kid in kids:
            try:
                self.seen.add(ProcRef.of(kid))
            except psutil.Error:
                pass
        self.shm |= mapped_shm(self.seen)

    @staticmethod
    def _title(ref: ProcRef) -> str:
        proc = ref.process()
        try:
            return " ".join(proc.cmdline()) if proc else ""
        except psutil.Error:
            return ""

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.path / "pytest.log").read_text()

    def assert_nothing_left(self, decoy: psutil.Process, within_s: float = 15) -> None:
        deadline = time.monotonic() + within_s
        alive = [r for r in self.seen if r.process() is not None]
        while alive and time.monotonic() < deadline:
            time.sleep(0.25)
            alive = [r for r in self.seen if r.process() is not None]
        assert not alive, f"left behind: {[(r.pid, self._title(r)) for r in alive]}\n{self.output()}"
        assert self.shm, "the engine mapped no shared memory: the check would be empty"
        leaked = [p for p in self.shm if os.path.exists(p)]
        assert not leaked, f"leaked /dev/shm entries: {leaked}"
        assert decoy.is_running() and decoy.status() != psutil.STATUS_ZOMBIE

    def kill_everything(self) -> None:
        """Test hygiene only: whatever the run left (if the test failed), by pid."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for ref in self.seen:
            proc = ref.process(zombie=True)
            if proc is not None:
                proc.kill()


@pytest.fixture
def downstream_run(tmp_path: Path) -> Iterator[type[Downstream]]:
    runs: list[Downstream] = []

    def start(source: str, *args: str) -> Downstream:
        run = Downstream(tmp_path, source, *args)
        runs.append(run)
        return run

    yield start  # type: ignore[misc]
    for run in runs:
        run.kill_everything()


def test_ctrl_c_in_mid_step(downstream_run, decoy: psutil.Process) -> None:
    """SIGINT to the run's process group while the worker is in a 16 s step."""
    run = downstream_run(LONG_STEP)
    run.watch_until_generating(extra_s=3)
    os.killpg(run.proc.pid, signal.SIGINT)
    code = run.wait()
    # Ctrl-C reaches vLLM's processes too, and they exit on it: whichever pytest sees
    # first, the KeyboardInterrupt or the engine's death, it must stop cleanly
    out = run.output()
    assert code in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.TESTS_FAILED), out
    if code == pytest.ExitCode.TESTS_FAILED:
        assert "EngineDeadError" in out and "INTERNALERROR" not in out
    run.assert_nothing_left(decoy)


def test_pytest_timeout_in_mid_step(downstream_run, decoy: psutil.Process) -> None:
    """pytest-timeout cuts a test whose worker hangs: the run goes on, the engine goes."""
    run = downstream_run(HANG, "-o", "timeout_func_only=true")
    run.watch_until_generating(extra_s=0)
    code = run.wait(timeout=180)
    out = run.output()
    assert code == pytest.ExitCode.TESTS_FAILED, out
    assert "Timeout" in out
    run.assert_nothing_left(decoy)


def test_harness_killed_in_mid_step(downstream_run, decoy: psutil.Process) -> None:
    """SIGKILL of pytest itself: no teardown runs, the reaper ends the engine."""
    run = downstream_run(LONG_STEP)
    run.watch_until_generating(extra_s=2)
    run.proc.kill()
    run.wait()
    run.assert_nothing_left(decoy, within_s=20)
