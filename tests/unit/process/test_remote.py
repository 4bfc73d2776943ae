"""Remote ranks judged from the progress they publish: computing, idle, gone after a stated silence."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pytest_enginedead.contract import progress
from pytest_enginedead.contract.decisions import Verdict
from pytest_enginedead.contract.judge import RankState
from pytest_enginedead.contract.progress import SILENT_AFTER_S
from pytest_enginedead.process import remote
from pytest_enginedead.process.remote import RemoteRanks
from tests.unit.contract.test_progress import record


class Clocks:
    """The reader's monotonic clock and the wall clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = 100.0

    def mono(self) -> float:
        return self.now

    def walltime(self) -> float:
        return self.wall

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.wall += seconds


def reader(tmp_path: Path, clocks: Clocks, **kw: object) -> RemoteRanks:
    return RemoteRanks(str(tmp_path), clock=clocks.mono, wall=clocks.walltime, **kw)  # type: ignore[arg-type]


def test_judge_busy_idle_gone_and_a_first_record() -> None:
    busy, idle = record(cores=1.0), record(cores=0.01)
    assert remote.judge(busy, 0.1).verdict is Verdict.SLOW
    assert remote.judge(idle, 0.1).verdict is Verdict.HUNG
    assert remote.judge(busy, SILENT_AFTER_S).verdict is Verdict.DEAD  # silent: gone, never SLOW
    assert remote.judge(replace(busy, ended=True), 0.0).verdict is Verdict.DEAD
    assert remote.judge(record(window_s=0.0, running=True), 0.0).verdict is Verdict.SLOW  # no rate yet
    assert remote.judge(record(window_s=0.0, running=False), 0.0).verdict is Verdict.HUNG
    assert remote.judge(idle, 0.1, threshold=0.005).verdict is Verdict.SLOW


def test_a_remote_rank_is_judged_by_its_progress_as_a_local_one() -> None:
    """The same rules as a local rank: spinning without advancing is HUNG, however busy its CPU;
    a rank that advances computes; one sitting in a collective waits for a peer."""
    spinning = record(cores=1.0, layered=True, phase=2, layer=3, layers=6, stalled_s=40.0, forward_s=41.0)
    look = remote.RemoteLook.of(spinning, 0.2, now=500.0)
    assert (look.verdict, look.judgement.state) == (Verdict.HUNG, RankState.SPINNING)
    assert look.judgement.reason.startswith("spinning: 100 % CPU, no layer finished for 40.2 s")
    advancing = replace(spinning, stalled_s=0.3)
    assert remote.RemoteLook.of(advancing, 0.2, now=500.0).verdict is Verdict.SLOW
    waiting = replace(advancing, in_collective_s=3.0)
    assert remote.RemoteLook.of(waiting, 0.2, now=500.0).judgement.state is RankState.WAITING


def test_silence_is_counted_from_the_last_change_on_the_readers_clock(tmp_path: Path) -> None:
    clocks = Clocks()
    progress.write_progress(str(tmp_path), record(wall=clocks.wall - 0.3))  # a first sight, 0.3 s old
    ranks = reader(tmp_path, clocks)
    (look,) = ranks.look()
    assert look.verdict is Verdict.SLOW and abs(look.silent_s - 0.3) < 1e-9
    clocks.sleep(1.0)
    progress.write_progress(str(tmp_path), record(seq=4, wall=clocks.wall + 500))  # its wall clock is off
    (look,) = ranks.look()
    assert look.silent_s == 0.0  # a new record: alive now, whatever its clock says
    clocks.sleep(SILENT_AFTER_S - 0.1)
    assert ranks.look()[0].verdict is Verdict.SLOW
    clocks.sleep(0.1)
    (look,) = ranks.look()
    assert look.verdict is Verdict.DEAD and look.gone and look.state == RankState.GONE.value
    assert "gone (no progress for 2.0 s; its last record: step 5, batch 64, running 2.0 s)" in look.describe()


def test_the_local_node_and_another_engines_records_are_left_out(tmp_path: Path) -> None:
    clocks = Clocks()
    progress.write_progress(str(tmp_path), record(node=0, rank=0))
    progress.write_progress(str(tmp_path), record(node=2, rank=2, wall=10.0))  # older than this engine
    progress.write_progress(str(tmp_path), record(node=1, rank=1))
    looks = reader(tmp_path, clocks, since_wall=50.0).look()
    assert [lk.key for lk in looks] == [(1, 1)]
    assert [lk.key for lk in reader(tmp_path, clocks, local_node=1).look()] == [(0, 0), (2, 2)]


def test_fresh_waits_for_a_record_from_after_the_call_or_for_the_silence(tmp_path: Path) -> None:
    clocks = Clocks()
    d = str(tmp_path)
    progress.write_progress(d, record(node=1, rank=1, seq=1))
    progress.write_progress(d, record(node=2, rank=2, seq=1, cores=0.0))
    ranks = reader(tmp_path, clocks)

    def sleep(seconds: float) -> None:  # node 1 keeps publishing; node 2 fell silent
        clocks.sleep(seconds)
        if clocks.now >= 1000.4:
            progress.write_progress(d, record(node=1, rank=1, seq=2))

    looks = ranks.fresh(sleep=sleep)
    by_node = {lk.record.node: lk for lk in looks}
    assert by_node[1].verdict is Verdict.SLOW and by_node[1].record.seq == 2
    assert by_node[2].verdict is Verdict.DEAD
    assert SILENT_AFTER_S <= clocks.now - 1000.0 <= SILENT_AFTER_S + 0.1  # waited for the silence, no more


def test_fresh_returns_at_once_without_remote_ranks(tmp_path: Path) -> None:
    clocks = Clocks()
    assert reader(tmp_path, clocks).fresh(sleep=clocks.sleep) == []
    assert clocks.now == 1000.0


def test_a_stack_asked_for_comes_back_or_none_after_the_timeout(tmp_path: Path) -> None:
    clocks = Clocks()
    d = str(tmp_path)
    ranks = reader(tmp_path, clocks)

    def answering(seconds: float) -> None:
        clocks.sleep(seconds)
        token = progress.read_request(d, 1, 1)
        assert token is not None
        progress.write_stack_answer(d, 1, 1, token, "main-thread 0x1\n")

    assert ranks.stack(1, 1, sleep=answering) == "main-thread 0x1\n"
    assert ranks.stack(1, 1, timeout_s=0.5, sleep=clocks.sleep) is None  # nobody answers this one


def test_a_look_describes_a_computing_remote_rank() -> None:
    look = remote.RemoteLook.of(record(), 0.2)
    assert look.describe() == ("VLLM::Worker_TP1 on node 1 (pid 9 in its node, host h): computing, "
                               "100 % of a core over its last 1.0 s (its published progress, 0.2 s old)")
    assert look.label == "node 1 TP1" and look.state == RankState.COMPUTING.value
    idle = remote.RemoteLook.of(record(cores=0.0, running=False), 0.2)
    assert idle.state == RankState.IDLE_BETWEEN.value
    assert idle.step_words() == "step 5, batch 64, finished in 2.00 s"
    assert remote.RemoteLook.of(record(cores=0.0), 0.2).state == RankState.IDLE_IN_STEP.value
    assert remote.RemoteLook.of(record(step=0), 0.2).step_words() == "no step yet"




def test_after_a_death_a_rank_is_judged_by_its_first_record_since_then(tmp_path: Path) -> None:
    """A headless node's rank may exit once its head died: its first record after the death says it
    was computing then (its last second's CPU), and that is the verdict; only silence is gone."""
    clocks = Clocks()
    d = str(tmp_path)
    progress.write_progress(d, record(seq=1, cores=1.0))
    ranks = reader(tmp_path, clocks)

    def sleep(seconds: float) -> None:
        clocks.sleep(seconds)
        progress.write_progress(d, record(seq=2, cores=0.9, ended=True))  # computing, then exiting

    (look,) = ranks.fresh(sleep=sleep)
    assert look.verdict is Verdict.SLOW and look.record.ended
    assert clocks.now - 1000.0 < 0.1  # no wait for a silence: it spoke
