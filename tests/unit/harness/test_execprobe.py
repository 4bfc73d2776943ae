"""The probe that tells slow from hung: pure judgement and real processes.

A "server" here is a real process tree built from ``bash -c 'exec -a TITLE ...'``:
a front process that listens on a port, a ``VLLM::EngineCore`` below it and a
``VLLM::Worker`` below that, busy or asleep.  Only vLLM is missing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.contract.guardfiles import guard_state_path, write_guard_state
from pytest_enginedead.contract.judge import RankEvidence, judge_ranks
from pytest_enginedead.contract.names import ENV_DIR, STATE_DIR_ENV
from pytest_enginedead.harness import execprobe
from pytest_enginedead.process import reading
from tests.support.guards import in_step, state
from tests.support.procs import wait_until_idle
from tests.support.standins import free_port

# --- answer_for: the answer from a guard's state --------------------------------------------


def test_a_slow_step_past_its_deadline_is_alive() -> None:
    answer = execprobe.answer_for(in_step(), now=100.3, look=None)
    assert answer.alive and answer.exit_code == 0
    assert "alive, computing: step 5 (batch 64) has run 10.3 s (deadline 2 s)" in answer.why
    assert "98 % CPU" in answer.why and "waits up to 1240 s" in answer.why
    judged = in_step(reason="computing: layer 17 of 30 after 300.0 s, advanced 0.4 s ago (99 % CPU); "
                            "ends in ~230 s", layer=16, layers=30)
    answer = execprobe.answer_for(judged, now=100.3, look=None)
    assert answer.why == ("alive, computing: step 5 (batch 64) has run 10.3 s (deadline 2 s); VLLM::Worker "
                          "pid 11 computing: layer 17 of 30 after 300.0 s, advanced 0.4 s ago (99 % CPU); "
                          "ends in ~230 s; the guard waits up to 1240 s")


def test_idle_inside_a_step_is_alive_until_hang_s_then_hung() -> None:
    idle = in_step(verdict=Verdict.HUNG, busy_at=100.0, updated=104.0)
    early = execprobe.answer_for(idle, now=104.2, look=None)
    assert early.alive and "no work for 4.2 s, hung at 5 s" in early.why
    hung = in_step(verdict=Verdict.HUNG, busy_at=100.0, updated=105.0)
    late = execprobe.answer_for(hung, now=105.2, look=None)
    assert not late.alive and late.exit_code == 1
    assert "hung: step 5 (batch 64)" in late.why and "no work for 5.2 s (hang_s 5 s)" in late.why
    spinning = in_step(verdict=Verdict.HUNG, busy_at=100.0, updated=105.0,
                       reason="spinning: 100 % CPU, no layer finished for 5.0 s, last layer 12 of 30")
    assert "pid 11 spinning: 100 % CPU, no layer finished for 5.0 s, last layer 12 of 30; no work for 5.2 s" \
        in execprobe.answer_for(spinning, now=105.2, look=None).why


def test_a_wait_the_guard_ended_is_not_alive() -> None:
    ended = in_step(in_step=False, ended=GuardAction.END, verdict=Verdict.HUNG, busy_at=95.0)
    hung = execprobe.answer_for(ended, 101.0, None)
    assert not hung.alive and "the guard ended step 5 after VLLM::Worker pid 11 showed no work for 5.0 s" \
        in hung.why
    capped = execprobe.answer_for(in_step(in_step=False, ended=GuardAction.CAP), 101.0, None)
    assert not capped.alive and "outlived the guard's 1240 s cap" in capped.why


def test_no_long_step_and_guard_off_are_alive() -> None:
    assert execprobe.answer_for(state(), 200.0, None).why == "alive: no step is running long"
    busy = judge_ranks([RankEvidence("VLLM::Worker", True, 1.0, 0.2, True)], 200.0)
    off = execprobe.answer_for(None, 200.0, look=busy)
    assert off.alive and "the worker is computing" in off.why and "ENGINEDEAD_GUARD=1" in off.why


def test_a_stale_state_is_judged_by_the_probes_own_look() -> None:
    """The engine core stopped rewriting its state: the worker's CPU decides."""
    stale = in_step(verdict=Verdict.SLOW, busy_at=100.0, updated=100.0)
    busy = judge_ranks([RankEvidence("VLLM::Worker", True, 1.0, 0.2, True)], 110.0)
    assert execprobe.answer_for(stale, now=110.0, look=busy).alive
    idle = judge_ranks([RankEvidence("VLLM::Worker", True, 0.0, 0.2, True)], 110.0)
    gone_quiet = execprobe.answer_for(stale, now=110.0, look=idle)
    assert not gone_quiet.alive and "no work for 10.0 s" in gone_quiet.why


# --- probe on real process trees -------------------------------------------------------

TREE = textwrap.dedent("""
    import os, socket, subprocess, sys, time
    port, mode, here = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen()
    worker = {
        "busy": "while True: pass",
        "idle": "import time; time.sleep(120)",
        # idle itself, its child computes (vLLM's workers compile in helper processes)
        "child": "import subprocess, sys, time\\n"
                 f"subprocess.Popen([{sys.executable!r}, '-c', 'while True: pass'])\\ntime.sleep(120)",
    }[mode]
    for name, code in (("worker.py", worker), ("core.py", (
            "import subprocess, sys, time\\n"
            f"subprocess.Popen(['bash', '-c', 'exec -a VLLM::Worker {sys.executable} {here}/worker.py'])\\n"
            "time.sleep(120)"))):
        with open(os.path.join(here, name), "w") as f:
            f.write(code)
    core = subprocess.Popen(["bash", "-c", f"exec -a VLLM::EngineCore {sys.executable} {here}/core.py"])
    print(core.pid, flush=True)
    time.sleep(120)
""")


@pytest.fixture
def server_tree(tmp_path: Path) -> Iterator[tuple[psutil.Process, int, Path]]:
    """(the front process, its port, its state directory); the worker is busy."""
    yield from fake_server(tmp_path, "busy")


def fake_server(tmp_path: Path, worker: str) -> Iterator[tuple[psutil.Process, int, Path]]:
    """A process tree shaped like vLLM's server: front (listening) → VLLM::EngineCore → VLLM::Worker."""
    port = free_port()
    env = {**os.environ, STATE_DIR_ENV: str(tmp_path)}
    env.pop(ENV_DIR, None)
    proc = subprocess.Popen([sys.executable, "-c", TREE, str(port), worker, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, start_new_session=True)
    front = psutil.Process(proc.pid)
    try:
        deadline = time.monotonic() + 20
        while not (execprobe.engine_cores(front) and execprobe.workers(execprobe.engine_cores(front)[0])):
            assert time.monotonic() < deadline, "the fake server tree did not come up"
            time.sleep(0.05)
        yield front, port, tmp_path
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_probe_finds_its_server_by_port_and_reads_its_guard(
    server_tree: tuple[psutil.Process, int, Path]
) -> None:
    front, port, directory = server_tree
    assert execprobe.listening_pid(port) == front.pid
    off = execprobe.probe(port=port)
    assert off.alive and "the worker is computing; the guard is off" in off.why
    (core,) = execprobe.engine_cores(front)
    path = guard_state_path(str(directory), core.pid)
    now = time.monotonic()
    write_guard_state(path, in_step(pid=core.pid, front=front.pid, sent=now - 9, busy_at=now,
                                           updated=now))
    assert execprobe.probe(pid=front.pid).why.startswith("alive, computing: step 5")
    write_guard_state(path, in_step(pid=core.pid, front=front.pid, in_step=False, ended=GuardAction.END,
                                           busy_at=now - 5, updated=now))
    hung = execprobe.probe(port=port)
    assert not hung.alive and hung.why.startswith("hung: the guard ended step 5")


def test_probe_says_dead_when_the_worker_or_the_server_is_gone(
    server_tree: tuple[psutil.Process, int, Path]
) -> None:
    front, port, _ = server_tree
    (core,) = execprobe.engine_cores(front)
    (worker,) = execprobe.workers(core)
    worker.kill()  # its parent does not reap it: a zombie, as a worker killed under vLLM
    deadline = time.monotonic() + 5
    while reading.alive(worker):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    answer = execprobe.probe(port=port)
    assert not answer.alive and "VLLM::Worker of engine core" in answer.why
    nobody = free_port()
    assert execprobe.probe(port=nobody) == execprobe.Answer(False, f"dead: nothing listens on port {nobody}")


def test_without_the_guard_a_worker_whose_child_computes_is_computing(tmp_path: Path) -> None:
    """The worker sits idle while its child process computes (vLLM compiles in helpers): its
    CPU counts the child's, as the harness's verdict and the guard count it."""
    for front, port, _ in fake_server(tmp_path, "child"):
        (worker,) = execprobe.workers(execprobe.engine_cores(front)[0])
        deadline = time.monotonic() + 10
        while not worker.children():
            assert time.monotonic() < deadline, "the worker's child did not start"
            time.sleep(0.05)
        answer = execprobe.probe(port=port)
        assert answer.alive and "the worker is computing; the guard is off" in answer.why, answer.why


def test_without_the_guard_an_idle_worker_is_idle(tmp_path: Path) -> None:
    for front, port, _ in fake_server(tmp_path, "idle"):
        (worker,) = execprobe.workers(execprobe.engine_cores(front)[0])
        wait_until_idle(worker.pid)  # past its interpreter's start
        answer = execprobe.probe(port=port)
        assert answer.alive and "the worker is idle; the guard is off" in answer.why, answer.why


# --- several nodes: the other nodes' ranks from the progress they publish ---------------------


def test_the_answer_names_the_node_of_the_worker_the_guard_judged() -> None:
    answer = execprobe.answer_for(in_step(node=1, worker=9), now=100.3, look=None)
    assert answer.alive and "VLLM::Worker pid 9 on node 1 at 98 % CPU" in answer.why
    ended = state(ended=GuardAction.END, verdict=Verdict.DEAD, silent="node 1 TP1", step=5, busy_at=90.0,
                  updated=96.0)
    dead = execprobe.answer_for(ended, now=100.0, look=None)
    assert not dead.alive
    assert dead.why == ("dead: the guard ended step 5: node 1 TP1 sent no progress and no rank computed "
                        "for 6.0 s")


def test_a_remote_rank_that_fell_silent_makes_the_engine_dead_and_one_that_computes_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_enginedead.contract.names import PROGRESS_DIR_ENV
    from pytest_enginedead.contract.progress import write_progress
    from pytest_enginedead.process import remote
    from tests.unit.contract.test_progress import record

    progress_dir = tmp_path / "progress"
    progress_dir.mkdir()
    monkeypatch.setenv(PROGRESS_DIR_ENV, str(progress_dir))  # the tree inherits it, as vLLM's do
    monkeypatch.setattr(remote, "SILENT_AFTER_S", 0.3)
    for front, port, _ in fake_server(tmp_path, "idle"):
        (core,) = execprobe.engine_cores(front)
        wait_until_idle(execprobe.workers(core)[0].pid)
        write_progress(str(progress_dir), record(wall=time.time(), cores=1.0))
        busy = execprobe.probe(port=port)
        assert busy.alive and "the worker is computing; the guard is off" in busy.why, busy.why
        time.sleep(0.5)  # node 1's rank says nothing more
        gone = execprobe.probe(port=port)
        assert not gone.alive and gone.exit_code == 1
        assert gone.why.startswith("dead: node 1 TP1 (VLLM::Worker_TP1, pid 9 on host h) sent no progress")
