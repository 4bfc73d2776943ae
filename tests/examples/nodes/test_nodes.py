"""Two nodes of one rank each (vLLM's multi-node executor), simulated on one machine; faults on node 1.

Run with ``--enginedead-nodes=2 --enginedead-batch-sizes=64``: the harness starts node 1
headless in a PID namespace of its own, gives each node a core, and judges node 1's rank
from the progress it publishes.  ``test_stock_deadline_false_death`` is meant to fail with
the evidence, naming node 1.  Three configurations (plain, guarded, served), each ended by its
last test's death: the false death, the spinning rank, the killed node (through the server).
"""

import os
import time

import psutil
import pytest

from pytest_enginedead import GuardAction, Verdict, assert_no_false_death

#: node 1's rank computes 6.4 s per step of 64 sequences; node 0's waits for it in a collective
SLOW_NODE_1 = {"slow_s_per_seq": 0.1, "nodes": [1]}


def test_two_nodes_start_and_answer(vllm_engine):
    out = vllm_engine.generate(4, max_tokens=2)
    assert [len(tokens) for tokens in out] == [2, 2, 2, 2]
    here = sorted(e.title for e in vllm_engine.liveness().values() if "Worker" in e.title)
    assert here == ["VLLM::Worker_TP0"], here  # the harness judges only the head's rank from /proc
    time.sleep(1.0)  # a record or two
    (remote,) = vllm_engine.evidence.remote_ranks()
    assert (remote.record.node, remote.record.rank, remote.record.title) == (1, 1, "VLLM::Worker_TP1")
    assert remote.record.pid != 0 and not remote.gone and remote.record.steps >= 2
    print(f"NODES {remote.label} pid {remote.record.pid} in its node")
    # each node's rank on a core of its own, bound by the harness (seen from this namespace, which
    # sees every process: the check a test may make, never the verdict)
    cores = {}
    for proc in psutil.process_iter(["cmdline"]):
        title = ((proc.info["cmdline"] or [""])[0].split() or [""])[0]  # setproctitle pads it
        if title in ("VLLM::Worker_TP0", "VLLM::Worker_TP1"):
            cores[title[-3:]] = sorted(os.sched_getaffinity(proc.pid))
    print(f"BOUND {sorted(cores.items())}")
    assert len(cores) == 2 and not set(cores["TP0"]) & set(cores["TP1"]), cores


@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(**SLOW_NODE_1)
def test_stock_deadline_false_death(vllm_engine):
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate()


@pytest.mark.enginedead_guard(hang_s=15)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(**SLOW_NODE_1)
def test_the_guard_waits_for_the_computing_remote_rank(vllm_engine):
    # the first step at two ranks compiles C++ for seconds, with pauses on a loaded box (a CI run saw
    # both ranks idle 5 s inside it): hang_s 15 s, so the guard does not take it for a hang
    vllm_engine.generate(4, max_tokens=1)
    out = vllm_engine.generate(max_tokens=2)  # 6.4 s steps of 64 on node 1 under a 2 s deadline: it waits
    assert len(out) == 64
    slow = [e for e in vllm_engine.guard_events() if e.batch == 64]
    assert slow and {e.verdict for e in slow} == {Verdict.SLOW}, slow
    assert {(e.node, e.rank) for e in slow} == {(1, 1)} and {e.ranks for e in slow} == {2}, slow


@pytest.mark.enginedead_guard(hang_s=15)
@pytest.mark.enginedead_timeout(30)
@pytest.mark.enginedead_inject(spin_at_step=2, nodes=[1])
def test_the_guard_ends_a_spinning_remote_rank(vllm_engine):
    """Node 1's rank spins at a whole core in its step's first layer, never finishing it; its
    published progress says it stopped advancing: HUNG, ended after hang_s, though its CPU is busy."""
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_engine):
            vllm_engine.generate(8, max_tokens=8)
    assert type(info.value).__name__ == "EngineDeadError"
    assert vllm_engine.deaths[-1]["verdict"] == Verdict.HUNG
    (ended,) = [e for e in vllm_engine.guard_events() if e.action is GuardAction.END]
    print(f"HUNG ended after {ended.waited_s:.2f} s (hang_s 15)")
    assert ended.verdict is Verdict.HUNG and ended.ranks == 2 and ended.node in (0, 1)


def test_two_nodes_serve(vllm_server):
    out = vllm_server.complete(8, max_tokens=4)
    assert [len(tokens) for tokens in out] == [4] * 8
    here = sorted(e.title for e in vllm_server.liveness().values() if "Worker" in e.title)
    print(f"SERVER WORKERS HERE {here}")
    assert here == ["VLLM::Worker_TP0"]


@pytest.mark.enginedead_timeout(30)
@pytest.mark.enginedead_inject(crash_at_step=2, nodes=[1])
def test_a_killed_node_is_dead(vllm_server):
    """Node 1's rank exits at step 2 of this test: DEAD, through the server's clients.  The
    server's last test (the first has warmed its ranks up): the death ends it, nothing restarts."""
    t0 = time.monotonic()
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_server):
            vllm_server.complete(8, max_tokens=8)
    assert type(info.value).__module__.startswith("openai")
    death = vllm_server.deaths[-1]
    print(f"KILLED verdict={death['verdict']} judged in {death['verdict_s']:.2f} s, "
          f"{time.monotonic() - t0:.2f} s after the call")
    assert death["verdict"] == Verdict.DEAD
    assert [r["state"] for r in death["remote_ranks"]] == ["gone"]
