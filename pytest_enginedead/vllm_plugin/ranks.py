"""The guard's look at its engine's ranks: each one's evidence for the one judge (``contract.judge``).

This node's workers are read from ``/proc`` (alive, CPU with their children's, over the guard's
trail of looks), their step progress records (which layer, when it last advanced) and their
collective marks; the other nodes' ranks come as their published progress shows them
(``process.remote``), judged by the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from ..contract.collectives import in_collective_since
from ..contract.decisions import Verdict
from ..contract.judge import EngineJudgement, Judgement, RankEvidence, judge_ranks
from ..contract.stepprogress import read_step_progress
from ..process import reading
from ..process.remote import RemoteLook

if TYPE_CHECKING:
    from .enginecore import EngineCorePlugin


@dataclass(frozen=True)
class JudgedWorker:
    """A rank as the guard's decisions name it."""

    pid: int  # on its own node (a remote rank's pid is in its PID namespace)
    rank: int | None
    name: str  # ``VLLM::Worker rank 1 of 2 on node 0``
    node: int | None  # None on one node


def local_evidence(
    procs: list[psutil.Process], workers: list[tuple[int, int]], trail: reading.CpuTrail,
    marks_dir: str | None, now: float,
) -> list[RankEvidence]:
    """This node's workers at ``now``: CPU over the trail, progress, collective (a worker keeps its
    step open while the guard watches its RPC, whether or not its record says so yet)."""
    cores, span = trail.cores(), trail.span_s
    found = []
    for i, proc in enumerate(procs):
        progress = read_step_progress(marks_dir, proc.pid)
        since = in_collective_since(marks_dir, proc.pid) if marks_dir else None
        rank = workers[i][0] if i < len(workers) else i
        found.append(RankEvidence(
            f"rank {rank}", True, cores[i], span, progress.in_step if progress is not None else True,
            progress, now - since if since is not None else None,
        ))
    return found


def names(workers: list[tuple[int, int]], remote: list[RemoteLook], node: int | None) -> list[JudgedWorker]:
    """How the decisions name each rank, in the order of ``local_evidence`` then ``remote``."""
    count = (len(workers) + len(remote)) or 1
    where = f" on node {node}" if node is not None else ""
    found = []
    for rank, pid in workers:
        name = f"VLLM::Worker rank {rank} of {count}" if count > 1 else "VLLM::Worker"
        found.append(JudgedWorker(pid, rank, name + where, node))
    for look in remote:
        r = look.record
        found.append(JudgedWorker(r.pid, r.rank, f"VLLM::Worker rank {r.rank} of {count} on node {r.node}",
                                  r.node))
    return found


class RankLooks:
    """What an engine's ranks showed across the looks of one step RPC: their CPU trail, their step
    records' sizes, the remote ranks' steps, and the last look's judgement."""

    def __init__(self) -> None:
        self._trail = reading.CpuTrail()  # the workers' CPU seconds over the last window
        self._sizes: tuple[int, ...] | None = None  # their step records' sizes at the last look
        self._remote_steps: tuple[tuple[int, bool], ...] = ()  # remote ranks' (step, running) last seen
        self._judgement: EngineJudgement | None = None
        self._who: list[JudgedWorker] = []  # the ranks it judged, in its order
        #: a remote rank whose progress stopped arriving
        self.gone: RemoteLook | None = None
        #: the last moment a rank showed work, as of the last look (None: none did)
        self.active_at: float | None = None

    def take(self, core: EngineCorePlugin, now: float, hang_s: float | None) -> Verdict:
        """A look at every rank: the engine's verdict by the one judge (``hang_s`` its stall window, None:
        the run's own pace);
        ``DEAD`` at once if a local worker is gone (vLLM's own monitor acts on it)."""
        self.active_at = None
        procs = core.worker_procs()
        if not procs or any(not reading.alive(p) for p in procs):
            self.gone = None
            return Verdict.DEAD
        remote = core.remote_looks()
        self.gone = next((lk for lk in remote if lk.gone), None)
        steps = tuple((lk.record.step, lk.record.running) for lk in remote)
        moved, self._remote_steps = steps != self._remote_steps, steps
        self._trail.add(now, [reading.cpu_seconds(p) for p in procs])
        sizes, last_sizes = core.record_sizes(procs), self._sizes
        self._sizes = sizes
        if last_sizes is None or self._trail.span_s <= 0:
            return Verdict.SLOW  # the first look: no rate yet
        workers = core.workers()
        evidence = local_evidence(procs, workers, self._trail, core.marks_dir, now)
        self._judgement = judge_ranks([*evidence, *(lk.judgement.evidence for lk in remote)], now, hang_s)
        self._who = names(workers, remote, core.nodes.node if remote else None)
        self.active_at = now if sizes != last_sizes or moved else self._judgement.active_at  # a new phase
        return self._judgement.verdict

    def busiest(self) -> Judgement | None:
        """The rank a decision names: one that computes, else the one that stopped the step."""
        return self._judgement.busiest() if self._judgement is not None else None

    def judged(self, workers: list[tuple[int, int]]) -> JudgedWorker:
        """How a decision names the rank ``busiest`` is (the first worker before any judgement)."""
        busiest, judgement = self.busiest(), self._judgement
        if busiest is not None and judgement is not None and len(self._who) == len(judgement.ranks):
            return self._who[judgement.ranks.index(busiest)]
        return names(workers, [], None)[0] if workers else JudgedWorker(0, None, "VLLM::Worker", None)
