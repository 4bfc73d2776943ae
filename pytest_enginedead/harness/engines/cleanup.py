"""Stopping what the harness started: by pid, never by name.

Every engine process is pinned by pid and creation time when it starts; only those
are ever signalled.  Shared-memory segments are removed only if one of our engine
processes had them mapped.  A small *reaper* process does the same if the harness
process itself dies first (``os._exit``, SIGKILL, a killed xdist worker).
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Any

import psutil

from ...process import reading
from ...process.pinned import ProcRef

SHM_DIR = "/dev/shm"
#: libiomp5's registration of a process in SHM_DIR: this prefix, its pid, "_", its uid
KMP_REGISTRATION = "__KMP_REGISTERED_LIB_"


#: How long the kernel may take to end a process after SIGKILL: one that frees gigabytes of memory
#: takes seconds on a loaded box, and a PID namespace's first process waits for every other one
#: of its namespace to go first.
KILL_WAIT_S = 30.0


@dataclass(frozen=True)
class Survivor:
    """A process of ours still there after SIGKILL and the wait for the kernel to take it."""

    pid: int
    title: str
    status: str  # psutil's word: ``disk-sleep`` is uninterruptible, inside the kernel

    @classmethod
    def of(cls, proc: psutil.Process) -> Survivor:
        return cls(proc.pid, reading.title(proc), reading.status(proc))

    def describe(self) -> str:
        state = ("in uninterruptible sleep (D state): the kernel holds it and no signal ends it"
                 if self.status == psutil.STATUS_DISK_SLEEP else self.status)
        return f"pid {self.pid} ({self.title}: {state})"


class ProcessesSurvived(RuntimeError):
    """An engine's processes outlived SIGKILL (``survivors``): said once, never thrown at pytest."""

    def __init__(self, survivors: list[Survivor]) -> None:
        self.survivors = survivors
        super().__init__("engine processes survived SIGKILL: " + "; ".join(s.describe() for s in survivors))


def started_children(me: psutil.Process, before: set[int], known: Iterable[ProcRef]) -> list[ProcRef]:
    """``me``'s processes started since ``before`` (by pid) and not ``known`` yet.

    ``me``'s own multiprocessing resource tracker is left out (an engine core's is the engine's).
    """
    seen = before | {r.pid for r in known}
    found = []
    for proc in me.children(recursive=True):
        if proc.pid in seen:
            continue
        with contextlib.suppress(psutil.Error):
            if proc.ppid() == me.pid and "multiprocessing.resource_tracker" in " ".join(proc.cmdline()):
                continue
            found.append(ProcRef.of(proc))
    return found


def mapped_shm(refs: Iterable[ProcRef]) -> set[str]:
    """``/dev/shm`` entries our processes have mapped (read from /proc/<pid>/maps).

    By the name mapped and by inode: a multiprocessing semaphore is made under a temporary
    name (glibc's ``sem_open``: ``sem.XXXXXX``, linked to ``sem.mp-...``, then unlinked),
    so the maps name a deleted file while the entry lives on under the other name.  And by
    pid: Intel's OpenMP (libiomp5, which vLLM's CPU guide preloads) registers each process in
    ``__KMP_REGISTERED_LIB_<pid>_<uid>`` without mapping it, and removes it only at a clean exit.
    """
    found: set[str] = set()
    inodes: set[int] = set()
    for ref in refs:
        if ref.process() is None:
            continue
        found.update(glob.glob(os.path.join(SHM_DIR, f"{KMP_REGISTRATION}{ref.pid}_*")))
        with contextlib.suppress(OSError):
            with open(f"/proc/{ref.pid}/maps") as maps:
                for line in maps:
                    idx = line.find(SHM_DIR + "/")
                    if idx >= 0:
                        found.add(line[idx:].strip().removesuffix(" (deleted)"))
                        fields = line.split()
                        if len(fields) >= 5 and fields[4].isdigit():
                            inodes.add(int(fields[4]))
    if inodes:
        with contextlib.suppress(OSError):
            for entry in os.scandir(SHM_DIR):
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False) and entry.inode() in inodes:
                        found.add(entry.path)
    return found


def unlink_shm(paths: Iterable[str]) -> list[str]:
    """Remove the given ``/dev/shm`` entries that still exist; return those removed."""
    removed = []
    for path in paths:
        if os.path.dirname(path) != SHM_DIR:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
        _forget_segment(os.path.basename(path))
    return removed


def _forget_segment(name: str) -> None:
    """Tell this process's resource tracker a segment is gone, so it warns of no leak at exit.

    Spawned engine processes register their ``SharedMemory`` segments with their
    parent's tracker; after we unlink one ourselves, register + unregister removes
    it from the tracker's set whether it was there or not (a bare unregister of an
    unknown name prints a traceback from the tracker).
    """
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    if not name.startswith("psm_") or getattr(tracker, "_fd", None) is None:
        return  # not multiprocessing's segment, or no tracker of ours is running
    with contextlib.suppress(Exception):
        resource_tracker.register("/" + name, "shared_memory")
        resource_tracker.unregister("/" + name, "shared_memory")


def terminate(
    refs: Iterable[ProcRef], grace_s: float = 3.0, at_once: bool = False, shm: set[str] | None = None
) -> list[Survivor]:
    """SIGTERM, then SIGKILL after ``grace_s``; return the processes still there once the kernel
    had ``KILL_WAIT_S`` to take them (should be none).

    ``at_once`` (a run that was interrupted): no grace.  The processes and everything
    below them are first stopped (SIGSTOP), which keeps a process that is spawning one
    (an engine core starting its worker) from leaving a half-started child behind, and
    found again until no new one appears, then all killed.

    ``shm`` gets the ``/dev/shm`` entries the processes map when they are killed: read from
    the frozen tree, so that a segment or semaphore made since the caller last looked (an
    engine core interrupted while it starts its worker) is not missed.  Killed, their
    multiprocessing resource tracker cannot remove them; the caller does.
    """
    procs = [p for p in (r.process(zombie=True) for r in refs) if p is not None]
    if not at_once:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        procs = _wait_gone(procs, grace_s)  # those that outlived SIGTERM
    tree = _frozen(procs)
    if shm is not None:
        shm |= mapped_shm(ProcRef.of(p) for p in _listed(tree))
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return [Survivor.of(p) for p in _wait_gone(tree, KILL_WAIT_S)]


def _listed(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` that still exist (``ProcRef.of`` needs their creation time)."""
    found = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.create_time()
            found.append(proc)
    return found


def _frozen(procs: list[psutil.Process]) -> list[psutil.Process]:
    """``procs`` and all their descendants, each stopped (SIGSTOP) before its children are read."""
    found = {p.pid: p for p in procs}
    frontier = list(procs)
    while frontier:
        for proc in frontier:
            with contextlib.suppress(psutil.Error):
                proc.suspend()
        below = []
        for proc in frontier:
            with contextlib.suppress(psutil.Error):
                below += [c for c in proc.children(recursive=True) if c.pid not in found]
        for child in below:
            found[child.pid] = child
        frontier = below
    return list(found.values())


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until each process is gone or a zombie; return those that are neither.

    Never reaps: a child belongs to whoever started it (multiprocessing in vLLM's
    client, ``subprocess.Popen``), and a child reaped behind its owner's back looks
    alive to it forever (``Process.is_alive()``: vLLM's shutdown then waits out its
    whole timeout on a process that is long gone).
    """
    deadline = time.monotonic() + timeout_s
    alive = [p for p in procs if reading.alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if reading.alive(p)]
    return alive


class HeldInterrupts:
    """Ctrl-C held back while engines stop: a stop cut in half leaves processes behind.

    While held (main thread only; nests), SIGINT only sets ``interrupted``; the stop
    looks at it to skip vLLM's graceful shutdown and finish quickly, and the caller
    raises ``KeyboardInterrupt`` once everything is stopped.
    """

    def __init__(self) -> None:
        self.interrupted = False
        self._depth = 0
        self._previous: Any = None

    def _note(self, signum: int, frame: object) -> None:
        self.interrupted = True

    @property
    def holding(self) -> bool:
        return self._depth > 0

    def take(self) -> bool:
        """Whether a Ctrl-C came while held (and forget it)."""
        came, self.interrupted = self.interrupted, False
        return came

    def __enter__(self) -> HeldInterrupts:
        if self._depth == 0 and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._note)
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


#: The one hold every stop in this process shares.
held = HeldInterrupts()


# --- the reaper ---------------------------------------------------------------------


#: How the reaper process starts: ``python -m pytest_enginedead.harness.engines.cleanup`` would have runpy
#: run this module a second time beside the copy the package import made (a RuntimeWarning).
