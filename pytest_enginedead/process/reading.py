"""One reading of a process: alive / gone / zombie, CPU seconds with its children, busy or idle.

Every part of the package that judges a process asks here, so the harness's verdict, the
exec probe (``enginedead probe``) and the guard inside vLLM cannot disagree on what a
process did: a worker whose compiler runs in a child process is computing, whichever of
them looks.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Collection, Iterable, Sequence

import psutil

from ..contract.decisions import DEFAULT_WINDOW_S

#: the statuses of a process that has ended (a zombie has ended; its parent has not reaped it)
GONE_STATUSES = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)

#: what ``status`` says of a process that no longer exists
GONE = "gone"


def status(proc: psutil.Process) -> str:
    """The process's status (``running``, ``sleeping``, ``zombie`` ...) or ``gone``.

    ``is_running()`` checks the creation time too: a reused pid reads as gone.
    """
    try:
        return proc.status() if proc.is_running() else GONE
    except psutil.Error:
        return GONE


def alive(proc: psutil.Process) -> bool:
    """Exists and has not ended (a zombie has ended)."""
    found = status(proc)
    return found != GONE and found not in GONE_STATUSES


def cpu_seconds(proc: psutil.Process, apart: Collection[int] = ()) -> float:
    """CPU seconds ``proc`` has used: its own, its reaped children's and its living
    descendants' — but not those of the descendants in ``apart`` (judged on their own),
    nor theirs.  A worker compiles in child processes: their CPU is the worker's work.
    0.0 for a process that is gone.
    """
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system + t.children_user + t.children_system + _descendants(proc, apart)


def _descendants(proc: psutil.Process, apart: Collection[int]) -> float:
    total = 0.0
    with contextlib.suppress(psutil.Error):
        for kid in proc.children():
            if kid.pid in apart:
                continue
            with contextlib.suppress(psutil.Error):
                t = kid.cpu_times()
                total += t.user + t.system + _descendants(kid, apart)
    return total


#: CPU use is judged over at least this much time (``decisions.busy``)
WINDOW_S = DEFAULT_WINDOW_S


def cores_between(before: Sequence[float], after: Sequence[float], seconds: float) -> list[float]:
    """CPU use in cores of each process from two ``cpu_seconds`` readings ``seconds`` apart."""
    if seconds <= 0:
        return [0.0 for _ in after]
    return [max(0.0, (a - b) / seconds) for b, a in zip(before, after, strict=True)]


class CpuTrail:
    """Readings of the same processes' CPU seconds over time, kept for one window: their CPU use
    over the last ``window_s`` (or since the first reading, while that is shorter)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._readings: deque[tuple[float, tuple[float, ...]]] = deque()

    def add(self, t: float, cpu: Sequence[float]) -> None:
        """A reading at ``t``; a reading of another set of processes starts the trail again."""
        if self._readings and len(self._readings[-1][1]) != len(cpu):
            self._readings.clear()
        self._readings.append((t, tuple(cpu)))
        while len(self._readings) > 2 and t - self._readings[1][0] >= self.window_s:
            self._readings.popleft()

    @property
    def span_s(self) -> float:
        """How much time the trail covers (0.0 with fewer than two readings)."""
        return self._readings[-1][0] - self._readings[0][0] if self._readings else 0.0

    def cores(self) -> list[float]:
        """Each process's CPU use over the trail's span, in cores."""
        (t0, first), (t1, last) = self._readings[0], self._readings[-1]
        return cores_between(first, last, t1 - t0)


def look(procs: Iterable[psutil.Process], seconds: float) -> list[float]:
    """Each process's CPU use (cores, its children counted) over a look of ``seconds``."""
    procs = list(procs)
    before = [cpu_seconds(p) for p in procs]
    t0 = time.monotonic()
    time.sleep(seconds)
    after = [cpu_seconds(p) for p in procs]
    return cores_between(before, after, time.monotonic() - t0)


def title(proc: psutil.Process) -> str:
    """The process's title as ``ps`` shows it (vLLM sets ``VLLM::Worker`` with setproctitle)."""
    try:
        cmdline = proc.cmdline()
        if cmdline and cmdline[0]:
            text = cmdline[0] if len(cmdline) == 1 or not cmdline[1] else " ".join(cmdline[:3])
            text = text.strip().splitlines()[0] if text.strip() else proc.name()
            return text if len(text) <= 120 else text[:117] + "..."
        return proc.name()
    except psutil.Error:
        return f"pid {proc.pid}"


def command_line(proc: psutil.Process) -> str:
    """The whole command line (empty for a process that is gone or hidden)."""
    with contextlib.suppress(psutil.Error):
        return " ".join(proc.cmdline()) or proc.name()
    return ""


def exists(pid: int) -> bool:
    """Whether a process with this pid exists now (any process: pins nothing)."""
    return psutil.pid_exists(pid)
