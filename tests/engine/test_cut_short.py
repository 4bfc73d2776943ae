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

import psutil
import pytest

from downstream import Background, Downstream, assert_nothing_left

pytestmark = pytest.mark.engine


def assert_run_left_nothing(run: Background, decoy: psutil.Process, within_s: float = 15) -> None:
    assert_nothing_left(run.seen, run.shm, decoy, within_s=within_s, require_shm=True, context=run.output())


def test_ctrl_c_in_mid_step(downstream: Downstream, decoy: psutil.Process) -> None:
    """SIGINT to the run's process group while the worker is in a 16 s step."""
    run = downstream.copy("long_step").start(plugins=["timeout"])
    run.watch(extra_s=3)
    os.killpg(run.proc.pid, signal.SIGINT)
    code = run.wait()
    # Ctrl-C reaches vLLM's processes too, and they exit on it: whichever pytest sees
    # first, the KeyboardInterrupt or the engine's death, it must stop cleanly
    out = run.output()
    assert code in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.TESTS_FAILED), out
    if code == pytest.ExitCode.TESTS_FAILED:
        assert "EngineDeadError" in out and "INTERNALERROR" not in out
    assert_run_left_nothing(run, decoy)


def test_pytest_timeout_in_mid_step(downstream: Downstream, decoy: psutil.Process) -> None:
    """pytest-timeout cuts a test whose worker hangs: the run goes on, the engine goes."""
    run = downstream.copy("hang").start("-o", "timeout_func_only=true", plugins=["timeout"])
    _assert_cut_by_pytest_timeout(run, decoy)


def test_harness_killed_in_mid_step(downstream: Downstream, decoy: psutil.Process) -> None:
    """SIGKILL of pytest itself: no teardown runs, the reaper ends the engine."""
    run = downstream.copy("long_step").start(plugins=["timeout"])
    run.watch(extra_s=2)
    run.proc.kill()
    run.wait()
    assert_run_left_nothing(run, decoy, within_s=20)


def test_server_ctrl_c_in_mid_step(downstream: Downstream, decoy: psutil.Process) -> None:
    """The API server, its engine core and worker: all gone after Ctrl-C in a 16 s step."""
    run = downstream.copy("server_cut").start("-k", "long_step", plugins=["timeout"])
    run.watch(extra_s=3)
    assert any("api_server" in " ".join(_cmdline(r)) for r in run.seen), "no API server was seen"
    os.killpg(run.proc.pid, signal.SIGINT)
    code = run.wait()
    out = run.output()
    assert code in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.TESTS_FAILED), out
    assert "INTERNALERROR" not in out
    assert_run_left_nothing(run, decoy)


def test_server_hang_cut_by_pytest_timeout(downstream: Downstream, decoy: psutil.Process) -> None:
    """A hung worker behind the server, cut by pytest-timeout: the whole tree goes."""
    run = downstream.copy("server_cut").start(
        "-k", "hangs", "-o", "timeout_func_only=true", plugins=["timeout"]
    )
    _assert_cut_by_pytest_timeout(run, decoy)


def _assert_cut_by_pytest_timeout(run: Background, decoy: psutil.Process) -> None:
    """The run's test was cut by pytest-timeout, the run failed it, and nothing is left."""
    run.watch(extra_s=0)
    code = run.wait(timeout=180)
    out = run.output()
    assert code == pytest.ExitCode.TESTS_FAILED, out
    assert "Timeout" in out
    assert_run_left_nothing(run, decoy)


def _cmdline(ref: object) -> list[str]:
    proc = ref.process()  # type: ignore[attr-defined]
    try:
        return proc.cmdline() if proc else []
    except psutil.Error:
        return []
