"""Nothing left behind: a run cut short still ends its own engine processes.

A downstream run is started in its own session, its engine process tree and their
``/dev/shm`` segments are recorded, then the run is cut: Ctrl-C (SIGINT to the run's
process group, as a terminal sends it) at each phase of an engine's and a server's
life, or pytest-timeout.  Afterwards every recorded process and segment must be gone, and a
bystander titled ``VLLM::Worker`` that the harness did not start must still be alive.  (SIGKILL
of the process that started the engine, in mid-step, is the reaper's job:
test_xdist.py::test_killed_worker_leaves_no_engine kills an xdist worker, a pytest process
like any other, and holds it.)
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.support import examples
from tests.support.downstream import (
    Background,
    Downstream,
    assert_nothing_left,
    left_in_sessions,
    left_in_temp,
)

pytestmark = pytest.mark.engine


def assert_run_left_nothing(run: Background, bystander: psutil.Process, within_s: float = 15) -> None:
    assert_nothing_left(run.seen, run.shm, bystander, within_s=within_s, require_shm=True,
                        context=run.output())


def _process(part: str) -> Callable[[Background], None]:
    """Until a process whose command line holds ``part`` runs below the run."""
    return lambda run: run.wait_for(f"a process {part!r}", lambda: run.seen_titled(part))


def _marker(name: str, extra_s: float = 0.0) -> Callable[[Background], None]:
    """Until the suite wrote ``name`` (and a worker was seen), then ``extra_s`` more."""

    def wait(run: Background) -> None:
        run.wait_for(f"the marker {name!r}", lambda: (run.path / name).exists())
        run.watch(extra_s=extra_s, marker=name)

    return wait


#: phase -> (the ctrl_c suite's test, what to wait for before pressing Ctrl-C)
CTRL_C: dict[str, tuple[str, Callable[[Background], None]]] = {
    "engine-starting": ("engine_long_step", _process("VLLM::EngineCore")),
    "engine-mid-step": ("engine_long_step", _marker("generating", extra_s=3)),
    "engine-evidence": ("engine_false_death", _marker("judging")),
    "engine-teardown": ("engine_quick", _marker("teardown")),
    "server-starting": ("server_long_step", _process("vllm.entrypoints.openai.api_server")),
    "server-waiting-for-health": ("server_long_step", _process("VLLM::EngineCore")),
    "server-mid-step": ("server_long_step", _marker("generating", extra_s=3)),
    "server-evidence": ("server_false_death", _marker("judging")),
    "server-teardown": ("server_quick", _marker("teardown")),
}


#: the step the ctrl_c suite injects (2 s a sequence, batch 8): a Ctrl-C never waits one out
INJECTED_STEP_S = 2.0 * 8


@pytest.mark.parametrize("phase", list(CTRL_C))
def test_ctrl_c_stops_the_run_at_every_phase(
    downstream: Downstream, bystander: psutil.Process, request: pytest.FixtureRequest, phase: str
) -> None:
    """Ctrl-C at each phase of an engine's and a server's life: the run stops sooner than one of
    its steps would take, with pytest's interrupted exit code (2), no INTERNALERROR, and leaves
    nothing: no process in its sessions, no ``/dev/shm`` segment, no run directory, nothing of
    vLLM's in its temp dir."""
    test, wait = CTRL_C[phase]
    # vLLM puts its ZMQ sockets under TMPDIR and refuses paths over 107 characters: under
    # xdist, pytest's own tmp_path is already close to that, so the scratch TMPDIR is short.
    scratch = Path(tempfile.mkdtemp(prefix="ed-"))
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    run = downstream.copy(examples.CTRL_C).start("-k", test, plugins=["timeout"],
                                                 env={"TMPDIR": str(scratch)})
    wait(run)
    os.killpg(run.proc.pid, signal.SIGINT)
    pressed = time.monotonic()
    code = run.wait(timeout=120)
    took = time.monotonic() - pressed
    out = run.output()
    print(f"{phase}: Ctrl-C -> exit {code} in {took:.1f} s")
    assert code == pytest.ExitCode.INTERRUPTED, out[-4000:]
    assert "INTERNALERROR" not in out, out[-4000:]
    assert took < INJECTED_STEP_S, f"{phase}: the run took {took:.1f} s to stop after Ctrl-C\n{out[-3000:]}"
    assert_nothing_left(run.seen, run.shm, bystander, within_s=5, context=out[-3000:])
    assert not left_in_sessions(run.sessions(), spare=[bystander.pid]), out[-3000:]
    assert not left_in_temp(scratch), out[-3000:]


def test_pytest_timeout_in_mid_step(downstream: Downstream, bystander: psutil.Process) -> None:
    """pytest-timeout cuts a test whose worker hangs: the run goes on, the engine goes."""
    run = downstream.copy(examples.HANG).start("-o", "timeout_func_only=true", plugins=["timeout"])
    _assert_cut_by_pytest_timeout(run, bystander)


def test_server_hang_cut_by_pytest_timeout(downstream: Downstream, bystander: psutil.Process) -> None:
    """A hung worker behind the server, cut by pytest-timeout: the whole tree goes."""
    run = downstream.copy(examples.SERVER_CUT).start(
        "-k", "hangs", "-o", "timeout_func_only=true", plugins=["timeout"]
    )
    _assert_cut_by_pytest_timeout(run, bystander)


def _assert_cut_by_pytest_timeout(run: Background, bystander: psutil.Process) -> None:
    """The run's test was cut by pytest-timeout, the run failed it, and nothing is left."""
    run.watch(extra_s=0)
    code = run.wait(timeout=180)
    out = run.output()
    assert code == pytest.ExitCode.TESTS_FAILED, out
    assert "Timeout" in out
    assert_run_left_nothing(run, bystander)
