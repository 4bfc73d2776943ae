"""Headless nodes on one machine: each in a PID namespace of its own, stopped by pid, nothing left.

Real namespaces (util-linux ``unshare``), real processes, no vLLM: a "node" here is a Python
process that maps a named semaphore (as vLLM's headless executor does, through
multiprocessing's spawn context) and lists the processes its own ``/proc`` shows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from pytest_enginedead.harness.engines import nodes
from pytest_enginedead.harness.engines.nodes import Node, NodeSet
from pytest_enginedead.logic.planning.engines import EngineSpec

#: What a node runs: a semaphore of multiprocessing's spawn context (a named ``/dev/shm`` entry
#: its resource tracker would remove at a clean exit), what its /proc shows, then sleep.
NODE = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    lock = multiprocessing.get_context("spawn").Lock()
    print("PIDS", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), flush=True)
    time.sleep(120)
    """
)


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(nodes.namespace_command(["true"]), capture_output=True, timeout=20)
    return done.returncode == 0


namespaces = pytest.mark.skipif(not _namespaces_work(), reason="no PID namespaces here (unshare refused)")


def test_a_node_runs_in_namespaces_of_its_own_and_dies_with_unshare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert nodes.namespace_command(["x"]) == [
        "unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "x"]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert nodes.namespace_command(["x"])[:3] == ["unshare", "--user", "--map-root-user"]


def test_a_process_in_no_namespace_of_its_own_has_its_own_pid_inside() -> None:
    assert nodes.namespace_pid(os.getpid()) == os.getpid()
    assert nodes.namespace_pid(2**22 + 12345) is None


@pytest.mark.processes
@namespaces
def test_a_node_sees_only_its_own_processes_and_is_stopped_by_pid_with_nothing_left(tmp_path: Path) -> None:
    spec = EngineSpec(str(tmp_path), 8, tensor_parallel=2, nodes=2)
    node_set = NodeSet(spec, str(tmp_path))
    log = tmp_path / "node-1.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(nodes.namespace_command([sys.executable, "-c", NODE]), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    node_set.nodes.append(Node(1, proc, str(log), str(tmp_path / "node-1")))
    until = time.monotonic() + 20
    while "PIDS" not in log.read_text() and time.monotonic() < until:
        time.sleep(0.05)
    node_set.adopt()
    inside = eval(log.read_text().split("PIDS", 1)[1].strip().splitlines()[0])  # our own print
    assert inside[0] == 1 and len(inside) <= 4  # itself (pid 1), its tracker: nothing of this machine's
    init = node_set.nodes[0].init
    assert init is not None and nodes.namespace_pid(init.pid) == 1
    assert f"node 1 pid {init.pid} (1 in its namespace)" == node_set.describe()
    assert node_set.alive() and node_set.failure() is None
    mapped = set(node_set.shm)
    assert any(os.path.basename(p).startswith("sem.") for p in mapped), mapped
    pids = node_set.pids
    assert node_set.stop() == []
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    assert not any(os.path.exists(p) for p in mapped)  # the semaphore its killed tracker left
    assert not node_set.alive()


@pytest.mark.processes
@namespaces
def test_a_node_that_exited_is_a_failure_with_what_it_printed(tmp_path: Path) -> None:
    node_set = NodeSet(EngineSpec(str(tmp_path), 8, tensor_parallel=2, nodes=2), str(tmp_path))
    log = tmp_path / "node-1.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(nodes.namespace_command(
            [sys.executable, "-c", "print('no such model'); raise SystemExit(3)"]), stdout=out,
            stderr=subprocess.STDOUT)
    proc.wait(timeout=20)
    node_set.nodes.append(Node(1, proc, str(log), str(tmp_path / "node-1")))
    failure = node_set.failure()
    assert failure is not None and failure.startswith("headless node 1 exited with status 3")
    assert "no such model" in failure
    assert node_set.stop() == []


def test_the_head_is_told_the_master_port_once_and_its_share_of_the_cores(tmp_path: Path) -> None:
    node_set = NodeSet(EngineSpec(str(tmp_path), 8, tensor_parallel=2, nodes=2), str(tmp_path))
    args = node_set.head_arguments()
    assert args["nnodes"] == 2 and args["node_rank"] == 0 and args["master_addr"] == "127.0.0.1"
    assert node_set.head_arguments()["master_port"] == args["master_port"] > 0
    env = node_set.head_environment([0, 1])
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["ENGINEDEAD_PROGRESS_DIR"] == str(tmp_path / "progress")
    assert os.path.isdir(env["ENGINEDEAD_PROGRESS_DIR"])
    assert "VLLM_CPU_OMP_THREADS_BIND" not in node_set.head_environment(None)  # the user binds them
