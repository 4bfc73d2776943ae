"""Two nodes of one rank each on one machine: vLLM's multi-node executor, node 1 in a PID namespace.

One downstream run (``examples.NODES``) with ``--enginedead-nodes=2``: the harness starts node 1
headless in a PID namespace of its own, binds a core per node (the 2-core box's ``0`` and ``1``,
nobody's hand-set binding), judges node 1's rank from the progress it publishes, and stops node 1
by pid when its head stops (vLLM leaves a headless node running after its head died).
Engines: one per configuration, each ended by its last test's death: plain (warm-up, then the
stock false death), guarded (slow, then hung), served (answers, then the killed node).
"""

from __future__ import annotations

import os
import re
import subprocess

import psutil
import pytest

from pytest_enginedead.contract.progress import PUBLISH_EVERY_S, SILENT_AFTER_S
from pytest_enginedead.harness.nodes import HEADLESS_MODULE
from pytest_enginedead.invllm.watch import FIRST_PROBE_S, PROBE_EVERY_S
from tests.support import examples
from tests.support.downstream import Downstream, assert_nothing_left, engine_processes

from .test_engine import run_engines
from .test_tensor_parallel import PEER_PART_S

pytestmark = pytest.mark.engine

HANG_S = 15.0
#: a killed node: vLLM's head hears of it from gloo at once; the verdict waits out the silence of
#: node 1's progress (``SILENT_AFTER_S``) and its first look (a publishing interval), then judges the
#: head's rank: seconds, not a deadline (1 s for the rest of the judging on a loaded box)
KILLED_WITHIN_S = SILENT_AFTER_S + PUBLISH_EVERY_S + 1.0


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _foreign_namespace_leftovers() -> list[str]:
    """Processes of a headless node, in any PID namespace, that are still alive."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if HEADLESS_MODULE in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.info['pid']}: {cmd[:100]}")
    return found


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two nodes of a rank need two cores")
@pytest.mark.skipif(not _unshare_works(), reason="no PID namespaces here (util-linux unshare refused)")
def test_two_nodes_each_rank_judged_from_where_it_runs(
    downstream: Downstream, decoy: psutil.Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stock 2 s deadline, node 1's rank busy 6.4 s per step: a false death naming node 1's rank
    computing and node 0's waiting; under the guard, node 1 slow: the step lives and the decisions
    name node 1; node 1 idle inside its step: HUNG within hang_s + two progress intervals; a server
    on two nodes answers, and node 1's rank killed behind it: DEAD within seconds; nothing left in
    any namespace.  Three engines: each configuration's death is its last test."""
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)  # the harness binds a core per node
    result, data = run_engines(
        downstream.copy(examples.NODES), "-s", "--enginedead-nodes=2", "--enginedead-batch-sizes=64",
        timeout=840,  # under the outer test's 900 s, as the tensor-parallel test's three engines
    )
    result.assert_outcomes(passed=5, failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["FAILED test_nodes.py::test_stock_deadline_false_death[[]bs64[]]*"])
    assert "false engine death: vLLM raised EngineDeadError while its worker was still computing" in out
    assert re.search(r"process:    VLLM::Worker_TP1 on node 1 \(pid \d+ in its node, host [^)]+\): "
                     r"computing, \d+ % of a core", out), out
    assert "rank:       node 1 TP1: computing" in out
    assert "rank:       node 0 TP0: waiting for a peer rank inside its step" in out
    # where node 1's rank was: in the step (its burn) when its stack arrives in time; on a loaded box
    # the stack it sends when asked may come after its step ended, and the line says so
    where = re.search(r"where:      rank node 1 TP1: .*", out)
    assert where is not None, out
    assert "in burn" in where.group(0) or "sent when asked, after the death" in where.group(0), where.group(0)
    assert re.search(r"NODES node 1 TP1 pid \d+ in its node", out), out
    killed = re.search(r"KILLED verdict=DEAD judged in ([\d.]+) s", out)
    assert killed is not None and float(killed.group(1)) <= KILLED_WITHIN_S, killed
    hung = re.search(r"HUNG ended after ([\d.]+) s", out)
    assert hung is not None
    # ended once no rank had shown progress for hang_s: node 1's progress arrives every 0.5 s, so
    # its idleness is seen within two intervals of the guard's looks; node 0's rank computes its part
    # of the step before it waits in the collective (PEER_PART_S, as at two ranks on one node)
    waited = float(hung.group(1))
    assert HANG_S <= waited <= HANG_S + FIRST_PROBE_S + PROBE_EVERY_S + 2 * PUBLISH_EVERY_S + PEER_PART_S, \
        hung.group(0)
    assert "SERVER WORKERS HERE ['VLLM::Worker_TP0']" in out
    assert data["engines_started"] == 3 and data["restarts"] == 0, data["engines"]
    labels = {e["label"] for e in data["engines"]}
    assert labels and all(label.startswith(("n2, tp2, bs64", "server, n2, tp2")) for label in labels), labels
    assert_nothing_left(*engine_processes(data), decoy)
    assert _foreign_namespace_leftovers() == []
