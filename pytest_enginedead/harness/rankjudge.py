"""After an engine death: each worker's evidence for the one judge (``contract.judge``).

A worker is judged as it stands at the verdict — its CPU over the sampler's window, its open
step (its step record), its step's progress through its layers, its collective mark — and, when
that finds it not computing but its own dump at the deadline proves it was in its step then, as
of that moment (vLLM stops its workers once it declares the engine dead, and a server's clients
hear of the death late).  Engines without records (any process you watch by pid) are judged by
their CPU alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..contract.decisions import Verdict
from ..contract.dumps import DeadlineStack
from ..contract.judge import Judgement, RankEvidence, RankState, judge_rank
from ..contract.stepprogress import StepProgress
from ..contract.steps import StepTime
from .liveness import ProcessEvidence, Sampler


class Records(Protocol):
    """An engine's records of its workers (``evidence.RunEvidence``)."""

    def running_step(self, pid: int) -> StepTime | None: ...

    def has_record(self, pid: int) -> bool: ...

    def in_collective_s(self, pid: int, now: float) -> float | None: ...

    def step_progress(self, pid: int) -> StepProgress | None: ...

    def deadline_stack(
        self, pid: int, step: StepTime, deadline_s: float, wait_s: float | None = 0.5
    ) -> DeadlineStack | None: ...


class Recorded(Protocol):
    """An engine with records and a deadline (a handle)."""

    @property
    def evidence(self) -> Records: ...

    @property
    def timeout_s(self) -> float: ...

    def step_times_since_start(self) -> list[StepTime]: ...


@dataclass
class Judged:
    """What judging the workers found, per pid."""

    judgements: dict[int, Judgement] = field(default_factory=dict)
    #: pid -> the step a computing worker was in
    steps: dict[int, StepTime] = field(default_factory=dict)
    #: pid -> what a worker judged as of the deadline was doing at the verdict
    at_deadline: dict[int, str] = field(default_factory=dict)


def judge_workers(
    engine: Recorded | None, sampler: Sampler, judged: dict[int, ProcessEvidence], threshold: float
) -> Judged:
    """Every process in ``judged``; one judged as of the deadline has its evidence replaced there."""
    found = Judged()
    for pid in list(judged):
        if engine is None or not engine.evidence.has_record(pid):
            ev = judged[pid]
            found.judgements[pid] = judge_rank(_cpu_only(ev, threshold), ev.at)
        else:
            found.judgements[pid] = _by_its_records(engine, sampler, pid, judged, threshold, found)
    return found


def _cpu_only(ev: ProcessEvidence, threshold: float) -> RankEvidence:
    return RankEvidence(ev.title, ev.alive, ev.cpu_cores, ev.window_s, True, threshold=threshold)


def _by_its_records(
    engine: Recorded, sampler: Sampler, pid: int, judged: dict[int, ProcessEvidence], threshold: float,
    found: Judged,
) -> Judgement:
    ev = judged[pid]
    records = engine.evidence
    running = records.running_step(pid)
    progress = records.step_progress(pid)
    now = judge_rank(RankEvidence(ev.title, ev.alive, ev.cpu_cores, ev.window_s, running is not None,
                                  progress, records.in_collective_s(pid, ev.at), threshold=threshold), ev.at)
    if now.verdict is Verdict.SLOW and running is not None:
        found.steps[pid] = running
        return now
    if now.state is RankState.WAITING:
        return now
    then = as_of_the_deadline(engine, sampler, pid)
    if then is None:
        return now
    judged[pid], step = then
    at = judged[pid]
    then_judged = judge_rank(RankEvidence(at.title, True, at.cpu_cores, at.window_s, True, progress,
                                          threshold=threshold), at.at)
    found.at_deadline[pid] = (
        "the worker was gone (vLLM stops its workers once it declares the engine dead)"
        if not ev.alive else "it sat idle in its step" if running is not None else "its step had ended"
    )
    if then_judged.verdict is Verdict.SLOW:
        found.steps[pid] = step
    return then_judged


def as_of_the_deadline(
    engine: Recorded, sampler: Sampler, pid: int
) -> tuple[ProcessEvidence, StepTime] | None:
    """The worker as it was when its last step reached the deadline, if it did.

    A server's clients hear of the death only after vLLM has declared it, and by then
    the step may have ended or vLLM may have stopped the worker: "gone" or "idle" then
    is not what it was doing when vLLM gave up.  The worker's own dump at the deadline
    proves it was in the step; the samples up to that moment say whether it was
    computing, and its progress record whether the step still advanced.  A worker that died
    or hung before the deadline wrote no such dump.
    """
    mine = [s for s in engine.step_times_since_start() if s.pid == pid]
    if not mine:
        return None
    step = max(mine, key=lambda s: s.started)
    dump = engine.evidence.deadline_stack(pid, step, engine.timeout_s, None)
    then = sampler.evidence_at(pid, dump.at) if dump is not None else None
    if then is None or not then.alive:
        return None
    return then, step
