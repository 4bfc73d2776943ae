"""What the code inside vLLM left, read by the harness from a live worker: its step, its stack."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import psutil

from pytest_enginedead.contract.dumps import MAIN_THREAD_PREFIX
from pytest_enginedead.harness.cleanup import ProcRef
from pytest_enginedead.harness.offline import Engine
from pytest_enginedead.harness.stacks import innermost_frames
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.planning.engines import EngineSpec


def test_the_harness_reads_a_live_workers_step_and_stack() -> None:
    """A never-started ``Engine`` whose worker is a real process running a busy step: the
    harness finds the worker by its record, sees the running step, and gets its stack
    (SIGUSR2) with the main thread inside ``burn``; stopping it ends the process."""
    busy = textwrap.dedent(
        """
        import sys, threading
        from pytest_enginedead.contract.control import Control, write_control
        from pytest_enginedead.invllm import faults, worker

        threading.Thread(target=threading.Event().wait, daemon=True).start()  # another thread
        write_control(sys.argv[1], Control(1, 1.0))
        rec = worker.StepRecorder(sys.argv[1])
        rec.run_step(8, lambda: faults.burn(60))
        """
    )
    engine = Engine(EngineSpec(BUNDLED_MODEL, 8))
    proc = subprocess.Popen([sys.executable, "-c", busy, engine.run_dir])
    try:
        ref = ProcRef.of(psutil.Process(proc.pid))
        engine.procs = [ref]
        deadline = time.monotonic() + 30
        while engine.evidence.running_step(proc.pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        step = engine.evidence.running_step(proc.pid)
        assert step is not None and (step.step, step.batch_size, step.pid) == (1, 8, proc.pid)
        assert engine.evidence.has_record(proc.pid) and engine.evidence.worker_pids == [proc.pid]
        stack = engine.evidence.capture_stack(proc.pid, timeout_s=5.0)
        at_deadline = engine.evidence.deadline_stack(proc.pid, step, 1.0)
    finally:
        engine.stop()
    assert ref.process() is None  # stopped by pid
    assert proc.wait(timeout=1) == -15  # and left for its owner to reap
    assert at_deadline is not None and at_deadline.step == 1 and at_deadline.ran_s >= 1.0
    assert "in burn" in innermost_frames(at_deadline.text)[1]
    assert not os.path.exists(engine.run_dir)
    assert [(s.step, s.running) for s in engine.evidence.steps()] == [(1, True)]  # the record outlives it
    assert stack is not None and stack.startswith(MAIN_THREAD_PREFIX)
    assert stack.count("Thread 0x") + stack.count("Current thread 0x") >= 2  # all threads dumped
    main = stack.splitlines()[0].split()[1]
    frames = innermost_frames(stack)
    assert main in frames[0]  # the main thread's block, busy in the step
    assert "in burn" in frames[1] and "faults.py" in frames[1]
    assert any("in run_step" in f for f in frames)
    assert not any("threading.py" in f for f in frames)  # not the other thread's frames
