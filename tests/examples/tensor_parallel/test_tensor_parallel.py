"""Two tensor-parallel ranks on CPU, each fault on one rank, judged rank by rank.

Run with ``--enginedead-tensor-parallel-size=2 --enginedead-batch-sizes=64``: the harness
binds one core per rank.  The first test warms the engine up (a first step at two ranks
compiles C++ in a child process for seconds); the others switch deadline and faults per
test.  ``test_stock_deadline_false_death`` is meant to fail with the evidence.  Three
configurations (plain, guarded, served), each ended by its last test's death: the false death,
the spinning rank, the killed rank (through the server).
"""

import time

import pytest

from pytest_enginedead import GuardAction, Verdict, assert_no_false_death

#: rank 1 computes 3.2 s per step of 64 sequences; rank 0 waits for it in a collective
SLOW_RANK_1 = {"slow_s_per_seq": 0.05, "ranks": [1]}


def test_two_ranks_start_and_answer(vllm_engine):
    out = vllm_engine.generate(4, max_tokens=2)
    assert [len(tokens) for tokens in out] == [2, 2, 2, 2]
    ranks = {s.pid for s in vllm_engine.step_times()}
    assert len(ranks) == 2  # both ranks ran every step
    print(f"RANKS {sorted(e.title for e in vllm_engine.liveness().values() if 'Worker' in e.title)}")


@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(**SLOW_RANK_1)
def test_stock_deadline_false_death(vllm_engine):
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate()


@pytest.mark.enginedead_guard(hang_s=5)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(**SLOW_RANK_1)
def test_the_guard_waits_for_the_computing_rank(vllm_engine):
    vllm_engine.generate(4, max_tokens=1)  # the first step at two ranks compiles for seconds: not judged here
    out = vllm_engine.generate()  # 3.2 s steps of 64 under a 2 s deadline: the guard waits
    assert len(out) == 64
    slow = [e for e in vllm_engine.guard_events() if e.batch == 64]
    assert slow and {e.verdict for e in slow} == {Verdict.SLOW}, slow
    assert {e.rank for e in slow} == {1} and {e.ranks for e in slow} == {2}, slow


@pytest.mark.enginedead_guard(hang_s=5)
@pytest.mark.enginedead_timeout(30)
@pytest.mark.enginedead_inject(spin_at_step=2, ranks=[1])
def test_the_guard_ends_a_spinning_rank(vllm_engine):
    """Rank 1 spins at a whole core in its step's first layer, never finishing it; rank 0 waits for
    it in a collective, spinning too.  By CPU both computed; by their layers neither advances: HUNG,
    the spinning rank named, ended after hang_s."""
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_engine):
            vllm_engine.generate(8, max_tokens=8)
    assert type(info.value).__name__ == "EngineDeadError"
    death = vllm_engine.deaths[-1]
    assert death["verdict"] == Verdict.HUNG
    states = {p.get("rank"): p.get("rank_state") for p in death["processes"]}
    print(f"SPIN ranks {states}; reasons {[p.get('reason') for p in death['processes']]}")
    (ended,) = [e for e in vllm_engine.guard_events() if e.action is GuardAction.END]
    print(f"HUNG ended after {ended.waited_s:.2f} s (hang_s 5)")
    assert ended.verdict is Verdict.HUNG and ended.ranks == 2 and ended.rank == 1


def test_two_ranks_serve(vllm_server):
    out = vllm_server.complete(8, max_tokens=4)
    assert [len(tokens) for tokens in out] == [4] * 8
    workers = sorted(e.title for e in vllm_server.liveness().values() if "Worker" in e.title)
    print(f"SERVER RANKS {workers}")
    assert len(workers) == 2


@pytest.mark.enginedead_timeout(30)
@pytest.mark.enginedead_inject(crash_at_step=2, ranks=[1])
def test_a_killed_rank_is_dead(vllm_server):
    """Rank 1 exits at step 2 of this test: DEAD, through the server's clients.  The server's
    last test (the first has warmed its ranks up): the death ends it, and nothing restarts."""
    t0 = time.monotonic()
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_server):
            vllm_server.complete(8, max_tokens=8)
    assert type(info.value).__module__.startswith("openai")
    death = vllm_server.deaths[-1]
    print(f"KILLED verdict={death['verdict']} after {time.monotonic() - t0:.2f} s")
    assert death["verdict"] == Verdict.DEAD
