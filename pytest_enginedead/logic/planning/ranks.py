"""Several ranks on CPU: how many, which cores each gets, and what a process's title says.

vLLM's CPU backend runs tensor (and pipeline) parallel ranks as worker processes of one
engine core; it binds each rank's OpenMP threads to a list of cores
(``VLLM_CPU_OMP_THREADS_BIND="0-3|4-7"``, one list per local rank) and, left to itself,
wants a NUMA node per rank, which a small box does not have.  The harness binds the ranks
from the cores it owns unless the user set the variable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

#: the variable vLLM binds each rank's threads by
BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
#: a worker's title names its ranks: ``VLLM::Worker_TP1``, ``VLLM::Worker_PP0_TP1``
_RANK_PART = re.compile(r"_(TP|PP|DP|PCP|DCP|EP)(\d+)")


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8"`` -> [0, 1, 2, 3, 8] (the syntax of a Linux cpu list); ValueError if it is none."""
    cores: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{text!r} is not a list of cores like 0-3,8")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"{text!r}: {part} runs backwards")
        cores.extend(range(first, last + 1))
    if not cores:
        raise ValueError(f"{text!r} names no core")
    return sorted(set(cores))


def cpu_list(cores: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> ``"0-2,5"``."""
    ordered = sorted(set(cores))
    spans: list[str] = []
    start = prev = ordered[0] if ordered else -1
    for c in ordered[1:]:
        if c != prev + 1:
            spans.append(f"{start}-{prev}" if prev > start else str(start))
            start = c
        prev = c
    if ordered:
        spans.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(spans)


def split_cores(cores: Sequence[int], ranks: int) -> list[list[int]]:
    """``cores`` in ``ranks`` contiguous groups, as even as they go (the first get one more)."""
    ordered = sorted(set(cores))
    if ranks < 1 or len(ordered) < ranks:
        raise ValueError(f"{len(ordered)} core(s) for {ranks} rank(s)")
    base, extra = divmod(len(ordered), ranks)
    groups, at = [], 0
    for i in range(ranks):
        size = base + (1 if i < extra else 0)
        groups.append(ordered[at:at + size])
        at += size
    return groups


def binding(cores: Sequence[int], ranks: int) -> str:
    """The ``VLLM_CPU_OMP_THREADS_BIND`` value giving each rank its own cores: ``"0|1"``."""
    return "|".join(cpu_list(group) for group in split_cores(cores, ranks))


def cores_problem(cores: Sequence[int], ranks: int, owner: str) -> str | None:
    """Why ``ranks`` ranks cannot each get a core of ``cores``, in one line with what would do."""
    if ranks <= len(set(cores)):
        return None
    return (f"{ranks} ranks need a core each, and {owner} owns {len(set(cores))} "
            f"({cpu_list(cores) or 'none'}): run fewer ranks, give it more cores (fewer xdist "
            f"workers), or bind them yourself with {BIND_ENV}='0|1'-style lists")


def ranks_of(title: str) -> dict[str, int]:
    """The ranks a worker's title names: ``VLLM::Worker_PP1_TP0`` -> {"PP": 1, "TP": 0}."""
    return {kind: int(n) for kind, n in _RANK_PART.findall(title)}


def rank_label(title: str) -> str:
    """``"TP1"``, ``"PP0 TP1"``, or ``""`` for a single rank's worker."""
    return " ".join(f"{kind}{n}" for kind, n in ranks_of(title).items())
