"""How an engine stops: vLLM's own shutdown where it helps, then its process tree ended by pid,
its ``/dev/shm`` entries removed, its records kept past its run directory, the ledger told.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Protocol

from ...process.pinned import ProcRef
from ..judging.evidence import RunEvidence
from . import ledger
from .cleanup import Survivor, mapped_shm, terminate, unlink_shm


class Stoppable(Protocol):
    """What stopping needs of an engine (``base.EngineBase`` is one)."""

    procs: list[ProcRef]
    shm: set[str]
    run_dir: str
    evidence: RunEvidence
    graceful_stop: bool
    stop_grace_s: float

    def shutdown(self, give_up: Callable[[], bool] | None = None) -> None: ...

    def stop_nodes(self) -> list[Survivor]: ...


def stop_tree(engine: Stoppable, fast: Callable[[], bool]) -> list[Survivor]:
    """Stop ``engine``: its graceful shutdown unless ``fast()`` (the run was interrupted) or its
    kind gains nothing by it, then every process of its tree and its nodes ended by pid.
    Returns the processes that outlived SIGKILL (should be none)."""
    engine.shm |= mapped_shm(engine.procs)
    if engine.graceful_stop and not fast():
        engine.shutdown(give_up=fast)
    leftover = terminate(engine.procs, grace_s=engine.stop_grace_s, at_once=fast(), shm=engine.shm)
    leftover += engine.stop_nodes()  # a headless node outlives its head (vLLM #32136)
    engine.shutdown()
    unlink_shm(engine.shm)
    engine.evidence.freeze()  # the records outlive their run directory
    shutil.rmtree(engine.run_dir, ignore_errors=True)
    ledger.stopped(engine, cut=fast())
    return leftover
