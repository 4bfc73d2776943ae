"""The pieces of the verdict's message: the steps so far, summarized; what each rank was doing."""

from __future__ import annotations

import time
from types import SimpleNamespace

from pytest_enginedead.contract.decisions import Verdict
from pytest_enginedead.contract.judge import RankState, combine
from pytest_enginedead.contract.stepprogress import Phase, StepProgress
from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.harness.liveness import LivenessSettings, ProcessEvidence, Sampler
from pytest_enginedead.harness.rankjudge import judge_workers
from pytest_enginedead.harness.remoteverdict import remote_lines
from pytest_enginedead.harness.verdict import Finding, judge_death, step_summary
from pytest_enginedead.process.remote import RemoteLook

COMPUTING, WAITING = RankState.COMPUTING.value, RankState.WAITING.value
IDLE, SPINNING = RankState.IDLE_IN_STEP.value, RankState.SPINNING.value


def test_step_summary() -> None:
    t = time.monotonic()
    assert step_summary([]) == "no step had finished"
    assert step_summary([StepTime(1, 8, t, None, 1)]) == "no step had finished"
    steps = [
        StepTime(1, 8, t, 0.5, 1),
        StepTime(2, 64, t, 2.0, 1),
        StepTime(3, 8, t, 0.25, 1),
        StepTime(4, 64, t, None, 1),  # running: not counted
    ]
    assert step_summary(steps) == "3 finished so far, p50 0.500 s, max 2.000 s at batch 64"


def evidence(pid: int, title: str, cores: float, alive: bool = True) -> ProcessEvidence:
    return ProcessEvidence(pid, title, alive, "running" if alive else "gone", cores, 1.0, 0, time.monotonic())


def judged_by_records(
    records: _Records, cores: dict[int, float]
) -> tuple[Verdict, dict[int, str], list[int]]:
    """Two ranks judged after a death from their records and CPU: the engine's verdict, each rank's
    state (as combined: a peer waits for the one computing), and the ranks found computing a step."""
    engine = SimpleNamespace(evidence=records, step_times_since_start=lambda: [], timeout_s=2.0)
    judged = {pid: evidence(pid, f"VLLM::Worker_TP{pid - 10}", c) for pid, c in cores.items()}
    found = judge_workers(engine, None, judged, 0.05)  # type: ignore[arg-type]
    whole = combine(list(found.judgements.values()))
    states = {pid: j.state.value for pid, j in zip(found.judgements, whole.ranks, strict=True)}
    return whole.verdict, states, sorted(found.steps)


def test_a_rank_idle_inside_its_step_while_a_peer_computes_is_waiting_not_hung() -> None:
    """Tensor-parallel ranks meet at every all-reduce: one computing keeps the other idle inside
    the same step.  That rank is named waiting; the one computing, computing; the engine SLOW."""
    verdict, states, steps = judged_by_records(_Records(set()), {10: 0.01, 11: 0.98})
    assert (verdict, states, steps) == (Verdict.SLOW, {10: WAITING, 11: COMPUTING}, [11])


def test_ranks_with_nobody_computing_are_idle_in_their_step_or_between_steps() -> None:
    verdict, states, _ = judged_by_records(_Records(set()), {10: 0.0, 11: 0.0})
    assert (verdict, states) == (Verdict.HUNG, {10: IDLE, 11: IDLE})
    records = _Records(set())
    records.running = {10}  # rank 1's step had ended
    verdict, states, _ = judged_by_records(records, {10: 0.0, 11: 0.0})
    assert states == {10: IDLE, 11: RankState.IDLE_BETWEEN.value}


def test_a_rank_spinning_without_advancing_is_hung_and_an_advancing_one_computes() -> None:
    """Both ranks at a whole core inside their layers: one's last layer began 60 s ago (a livelock,
    past the stall window), the other's just now.  By CPU alone both computed."""
    records = _Records(set())
    now = time.monotonic()
    records.progress = {10: StepProgress(3, Phase.FORWARD, 12, 30, now - 90, now - 89, now - 60, 0.5),
                        11: StepProgress(3, Phase.FORWARD, 12, 30, now - 90, now - 89, now - 0.5, 0.5)}
    verdict, states, steps = judged_by_records(records, {10: 1.0, 11: 1.0})
    assert (verdict, states, steps) == (Verdict.SLOW, {10: SPINNING, 11: COMPUTING}, [11])
    del records.progress[11]
    records.progress[11] = records.progress[10]
    verdict, states, steps = judged_by_records(records, {10: 1.0, 11: 1.0})
    assert (verdict, states, steps) == (Verdict.HUNG, {10: SPINNING, 11: SPINNING}, [])


def test_the_message_names_each_rank_and_where_the_computing_one_was() -> None:
    judged = {10: evidence(10, "VLLM::Worker_TP0", 0.01), 11: evidence(11, "VLLM::Worker_TP1", 0.98)}
    finding = Finding(Verdict.SLOW, "EngineDeadError", 2.1, judged, LivenessSettings(),
                      ranks={10: ("TP0", WAITING), 11: ("TP1", COMPUTING)},
                      slow_paths=["the MoE layers run vLLM's per-expert Python loop ... [5 of 6 samples]"])
    text = finding.message()
    assert f"  rank:       TP0: {WAITING}" in text and "  rank:       TP1: computing" in text
    assert "  slow path:  the MoE layers run vLLM's per-expert Python loop" in text
    rows = {p["pid"]: p for p in finding.to_dict()["processes"]}
    assert rows[11]["rank"] == "TP1" and rows[11]["rank_state"] == COMPUTING
    assert finding.to_dict()["slow_paths"]


# --- ranks on another node: judged from their published progress ------------------------


class NodeEvidence:
    """An engine's records as ``RunEvidence`` gives them, with one rank on another node."""

    def __init__(self, pid: int, looks: list[RemoteLook], stack: str | None) -> None:
        self.worker_pids = [pid]
        self._looks, self._stack = looks, stack
        self.has_remote = True
        self.asked: list[tuple[int, int]] = []

    def running_step(self, pid: int) -> StepTime | None:
        return StepTime(5, 64, time.monotonic() - 2.0, None, pid)

    def has_record(self, pid: int) -> bool:
        return True

    def in_collective_s(self, pid: int, now: float) -> float | None:
        return None

    def step_progress(self, pid: int) -> StepProgress | None:
        return None

    def deadline_stack(self, pid: int, step: StepTime, deadline_s: float, wait_s: float | None = 0.5) -> None:
        return None

    def capture_stack(self, pid: int, timeout_s: float = 0.4) -> str | None:
        return None

    def remote_ranks(self, fresh: bool = False) -> list[RemoteLook]:
        assert fresh  # after a death the verdict waits for news
        return self._looks

    def remote_stack(self, node: int, rank: int, timeout_s: float = 1.0) -> str | None:
        self.asked.append((node, rank))
        return self._stack


class NodeEngine:
    liveness_settings = LivenessSettings()
    timeout_s = 2.0

    def __init__(self, pid: int, looks: list[RemoteLook], stack: str | None = None) -> None:
        self.pids = [pid]
        self.evidence = NodeEvidence(pid, looks, stack)

    def step_times_since_start(self) -> list[StepTime]:
        return []

    def death_facts(self) -> dict[str, object]:
        return {"deadline_s": 2.0, "batch_size": 64}


BURNING = (
    "main-thread 0x0000000000000001\n"
    "Thread 0x0000000000000001 (most recent call first):\n"
    '  File "/site/pytest_enginedead/invllm/worker.py", line 51 in burn\n'
    '  File "/site/pytest_enginedead/invllm/worker.py", line 270 in run_step\n'
)


def test_a_false_death_whose_computing_rank_is_on_another_node_names_that_node_and_rank() -> None:
    """The head's rank idles in its step (waiting for its peer); node 1's rank publishes that it
    computes: SLOW, the head's rank waiting, and ``where:`` from the stack node 1 sent when asked."""
    from tests.support import procs
    from tests.unit.contract.test_progress import record

    computing = RemoteLook.of(record(), 0.2)
    with procs.worker("idle", 30.0) as idle:
        engine = NodeEngine(idle.pid, [computing], BURNING)
        with Sampler([idle.pid], 0.1, 0.5) as sampler:
            time.sleep(0.8)
            finding = judge_death(engine, sampler, time.monotonic() - 2.1, "EngineDeadError",
                                  LivenessSettings())
    assert finding.verdict is Verdict.SLOW and finding.false_death
    assert finding.ranks == {idle.pid: (f"node 0 pid {idle.pid}", WAITING)}
    text = finding.message()
    assert "  process:    VLLM::Worker_TP1 on node 1 (pid 9 in its node, host h): computing" in text
    assert "  rank:       node 1 TP1: computing" in text
    assert "  where:      rank node 1 TP1: " in text and "in burn" in text
    assert engine.evidence.asked == [(1, 1)]
    (entry,) = finding.to_dict()["remote_ranks"]
    assert (entry["node"], entry["rank"], entry["verdict"], entry["state"]) == (1, 1, "SLOW", COMPUTING)


def test_a_rank_on_another_node_that_fell_silent_is_a_genuine_death() -> None:
    from tests.support import procs
    from tests.unit.contract.test_progress import record

    gone = RemoteLook.of(record(), 2.4)
    with procs.worker("idle", 30.0) as idle:
        engine = NodeEngine(idle.pid, [gone])
        with Sampler([idle.pid], 0.1, 0.5) as sampler:
            time.sleep(0.8)
            finding = judge_death(engine, sampler, time.monotonic() - 0.3, "EngineDeadError",
                                  LivenessSettings())
    assert finding.verdict is Verdict.DEAD and not finding.false_death
    assert finding.ranks[idle.pid][1] == "idle inside its step"  # nobody computes: not waiting for one
    assert engine.evidence.asked == []  # a genuine death waits for no stack
    assert "gone (no progress for 2.4 s" in "\n".join(remote_lines(finding.remote))


class _Records:
    """Two ranks' records: both inside step 3 (those in ``running``); ``marked`` ranks sit in a
    collective; ``progress`` their step progress (none: no layers seen)."""

    def __init__(self, marked: set[int]) -> None:
        self.marked = marked
        self.worker_pids = [10, 11]
        self.running = {10, 11}
        self.progress: dict[int, StepProgress] = {}
        self.step = StepTime(3, 64, time.monotonic() - 2.0, None, 10)

    def running_step(self, pid: int) -> StepTime | None:
        return self.step if pid in self.running else None

    def has_record(self, pid: int) -> bool:
        return True

    def in_collective_s(self, pid: int, now: float) -> float | None:
        return 1.0 if pid in self.marked else None

    def step_progress(self, pid: int) -> StepProgress | None:
        return self.progress.get(pid)

    def deadline_stack(self, pid: int, step: StepTime, deadline_s: float, wait_s: float | None = 0.5) -> None:
        return None

    def waiting_for_a_peer(self, pid: int) -> bool:
        return pid in self.marked


def test_a_rank_busy_inside_a_collective_waits_and_the_peers_cpu_decides() -> None:
    """vLLM's CPU all-reduce spins: rank 0 at a full core, its mark saying it sits in a collective.
    Its peer idle: HUNG, rank 0 waiting, rank 1 idle; its peer computing: SLOW on rank 1 alone.
    Without the mark, the spin is judged work and the hung rank said to wait for it (SLOW on
    rank 0: the misjudgement the mark ends)."""
    out = {}
    for marked, peer in ((set(), 0.0), ({10}, 0.0), ({10}, 0.97)):
        verdict, states, steps = judged_by_records(_Records(marked), {10: 0.99, 11: peer})
        out[(bool(marked), peer)] = (verdict, states[10], states[11], steps)
    assert out == {
        (False, 0.0): (Verdict.SLOW, COMPUTING, WAITING, [10]),  # backwards: the hung rank "waits"
        (True, 0.0): (Verdict.HUNG, WAITING, IDLE, []),
        (True, 0.97): (Verdict.SLOW, WAITING, COMPUTING, [11]),
    }
