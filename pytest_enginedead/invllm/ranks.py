"""The guard's look at its engine's ranks: each one's evidence for the one judge (``contract.judge``).

This node's workers are read from ``/proc`` (alive, CPU with their children's, over the guard's
trail of looks), their step progress records (which layer, when it last advanced) and their
collective marks; the other nodes' ranks come as their published progress shows them
(``process.remote``), judged by the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from ..contract.collectives import in_collective_since
from ..contract.judge import RankEvidence
from ..contract.stepprogress import read_step_progress
from ..process import reading
from ..process.remote import RemoteLook


@dataclass(frozen=True)
class Who:
    """A rank as the guard's decisions name it."""

    pid: int  # on its own node (a remote rank's pid is in its PID namespace)
    rank: int | None
    node: int | None  # None on one node
    name: str  # ``VLLM::Worker rank 1 of 2 on node 0``


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


def names(workers: list[tuple[int, int]], remote: list[RemoteLook], node: int | None) -> list[Who]:
    """How the decisions name each rank, in the order of ``local_evidence`` then ``remote``."""
    count = (len(workers) + len(remote)) or 1
    where = f" on node {node}" if node is not None else ""
    found = []
    for rank, pid in workers:
        name = f"VLLM::Worker rank {rank} of {count}" if count > 1 else "VLLM::Worker"
        found.append(Who(pid, rank, node, name + where))
    for look in remote:
        r = look.record
        found.append(Who(r.pid, r.rank, r.node, f"VLLM::Worker rank {r.rank} of {count} on node {r.node}"))
    return found
