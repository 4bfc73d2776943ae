"""What a run left behind after its stop: processes, ``/dev/shm`` entries, file descriptors.

``Leaks()`` notes this process's open file descriptors, its children and ``/dev/shm`` before
anything starts; ``after(procs, shm)`` counts what is still there once everything was
stopped: each engine process the run recorded (by pid and creation time) still alive, each
``/dev/shm`` entry they mapped still present (and any new multiprocessing or OpenMP entry
that no living process maps),
and this process's descriptors beyond the ones it started with.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterable
from typing import Any

import psutil

from ...process.pinned import ProcRef
from ..waiting import wait_until
from .cleanup import KMP_REGISTRATION, SHM_DIR

#: the ``/dev/shm`` names vLLM's processes make (multiprocessing segments and semaphores,
#: Intel OpenMP's registrations)
SHM_PREFIXES = ("psm_", "sem.mp-", KMP_REGISTRATION)


def open_fds() -> list[str]:
    """This process's open descriptors, each as what it points to."""
    found = []
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                found.append(os.readlink(f"/proc/self/fd/{fd}"))
    return found


def _orphans(paths: set[str]) -> set[str]:
    """Those of ``paths`` no living process maps (by inode; an OpenMP registration: its pid is gone).

    Another user's engine on the same machine makes entries too; they are not this run's.
    """
    inodes: dict[int, str] = {}
    for path in paths:
        with contextlib.suppress(OSError):
            inodes[os.stat(path).st_ino] = path
    orphans = set(inodes.values())
    for pid in psutil.pids():
        if not orphans:
            break
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and fields[4].isdigit() and int(fields[4]) in inodes:
                    orphans.discard(inodes[int(fields[4])])
    for path in list(orphans):
        name = os.path.basename(path)
        if name.startswith(KMP_REGISTRATION):
            owner = name[len(KMP_REGISTRATION):].split("_")[0]
            if owner.isdigit() and psutil.pid_exists(int(owner)):
                orphans.discard(path)
    return orphans


def _shm_names() -> set[str]:
    with contextlib.suppress(OSError):
        return set(os.listdir(SHM_DIR))
    return set()


class Leaks:
    """Before and after: see the module's doc."""

    def __init__(self, spare: Iterable[int] = ()) -> None:
        self.fds = len(open_fds())
        self.shm = _shm_names()
        me = psutil.Process()
        self.children = {p.pid for p in me.children(recursive=True)} | set(spare)

    def after(self, procs: Iterable[ProcRef], shm: Iterable[str], spare: Iterable[int] = (),
              settle_s: float = 5.0) -> dict[str, Any]:
        """What is left: ``{"processes", "shm", "fds"}`` counts and ``what`` names them."""
        procs, shm, spare = list(procs), set(shm), set(spare)
        wait_until(lambda: all(r.process() is None for r in procs), settle_s, every_s=0.1)
        left = [r for r in procs if r.process() is not None]
        names = {f"pid {r.pid}" for r in left}
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process().children(recursive=True):
                if child.pid in self.children or child.pid in spare:
                    continue
                with contextlib.suppress(psutil.Error):
                    if child.status() != psutil.STATUS_ZOMBIE:
                        names.add(f"pid {child.pid} ({child.name()})")
        new = {os.path.join(SHM_DIR, n) for n in _shm_names() - self.shm if n.startswith(SHM_PREFIXES)}
        shm_left = sorted({p for p in shm if os.path.exists(p)} | _orphans(new))
        gc.collect()
        fds = open_fds()
        extra = max(0, len(fds) - self.fds)
        return {"processes": len(names), "shm": len(shm_left), "fds": extra,
                "what": {"processes": sorted(names), "shm": shm_left,
                         "fds": sorted(fds)[-extra:] if extra else []}}
