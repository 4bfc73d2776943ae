"""Is a process computing, idle, or gone?  Background sampling and the ``Verdict``.

A ``Sampler`` polls a fixed set of processes (status, CPU time, RSS) on a thread.
Processes are pinned by pid *and* creation time, so a reused pid is never mistaken
for the process we started.  ``classify`` turns one process's evidence into a
``Verdict``: alive and computing → ``SLOW``; alive and idle → ``HUNG``; gone or
zombie → ``DEAD``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import psutil

from ..contract.decisions import BUSY_CORES, DEFAULT_INTERVAL_S, DEFAULT_WINDOW_S, Verdict, busy
from ..logic.inputs.liveness import LivenessSettings as LivenessSettings  # defined with the options
from ..process import reading

#: how far back a sampler keeps its samples
HISTORY_S = 120.0


@dataclass(frozen=True)
class Sample:
    t: float  # time.monotonic()
    alive: bool
    status: str
    cpu_s: float  # user + system CPU seconds so far
    rss: int


@dataclass(frozen=True)
class ProcessEvidence:
    """One process at one moment, and what it did over the window before."""

    pid: int
    title: str
    alive: bool
    status: str
    #: CPU use over the window, in cores (1.0 = one core flat out)
    cpu_cores: float
    window_s: float
    rss: int
    at: float

    def describe(self) -> str:
        state = self.status if self.alive else f"gone ({self.status})"
        return (
            f"{self.title} (pid {self.pid}): {state}, "
            f"{self.cpu_cores * 100:.0f} % of a core over the last {self.window_s:.1f} s, "
            f"rss {self.rss / 2**20:.0f} MiB"
        )


def classify(evidence: ProcessEvidence, threshold: float = BUSY_CORES) -> Verdict:
    """SLOW if alive and computing, HUNG if alive and idle, DEAD if gone or zombie."""
    if not evidence.alive:
        return Verdict.DEAD
    return Verdict.SLOW if busy(evidence.cpu_cores, evidence.window_s, threshold) else Verdict.HUNG


#: a process this old has exec'd its program: its title is its own
TITLE_SETTLES_S = 0.5


class Watched:
    """One process, pinned by pid and creation time, with its sample history."""

    def __init__(self, pid: int, history: int) -> None:
        self.pid = pid
        self.title = f"pid {pid}"
        self.samples: deque[Sample] = deque(maxlen=history)
        #: a title read in a process's first moments may be its parent's, or empty (before its exec)
        self._title_settled = False
        try:
            self.proc: psutil.Process | None = psutil.Process(pid)
            self._read_title()
        except psutil.Error:
            self.proc = None

    def _read_title(self) -> None:
        assert self.proc is not None
        self._title_settled = time.time() - self.proc.create_time() > TITLE_SETTLES_S
        self.title = reading.title(self.proc)

    def sample(self, apart: Collection[int] = ()) -> Sample:
        """Sample the process now; once it is gone, its history stays as it was.

        Its CPU counts its living descendants' (a worker compiles in a child process: at
        TP >= 2 a first step's C++ build runs ~20 s in one while the rank itself waits),
        except those in ``apart``, which are judged on their own.
        """
        if self.samples and not self.samples[-1].alive:
            return self.samples[-1]  # gone stays gone (pinned by creation time)
        now = time.monotonic()
        proc = self.proc
        status = reading.GONE if proc is None else reading.status(proc)
        if proc is None or status == reading.GONE:
            s = Sample(now, False, reading.GONE, self._last_cpu(), 0)
        else:
            try:
                with proc.oneshot():
                    rss = proc.memory_info().rss
                    cpu = reading.cpu_seconds(proc, apart)  # reaped and living children count
                s = Sample(now, status not in reading.GONE_STATUSES, status, cpu, rss)
                if not self._title_settled:
                    self._read_title()
            except psutil.Error:
                s = Sample(now, False, reading.GONE, self._last_cpu(), 0)
        self.samples.append(s)
        return s

    def _last_cpu(self) -> float:
        return self.samples[-1].cpu_s if self.samples else 0.0

    def evidence(self, window_s: float) -> ProcessEvidence:
        """Evidence as of the newest sample, CPU measured over ``window_s`` before it."""
        return self._evidence_at(self.samples[-1] if self.samples else self.sample(), window_s)

    def evidence_at(self, t: float, window_s: float) -> ProcessEvidence | None:
        """Evidence as of the newest sample taken at or before ``t``, or None."""
        last = next((s for s in reversed(self.samples) if s.t <= t), None)
        return None if last is None else self._evidence_at(last, window_s)

    def _evidence_at(self, last: Sample, window_s: float) -> ProcessEvidence:
        first = last
        for s in reversed(self.samples):
            if s.t > last.t:
                continue
            first = s
            if last.t - s.t >= window_s:
                break
        span = last.t - first.t
        cores = (last.cpu_s - first.cpu_s) / span if span > 0 else 0.0
        return ProcessEvidence(
            self.pid, self.title, last.alive, last.status, max(0.0, cores),
            span, last.rss, last.t,
        )


class Sampler:
    """Samples a set of processes every ``interval_s`` on a daemon thread."""

    def __init__(
        self,
        pids: Iterable[int],
        interval_s: float = DEFAULT_INTERVAL_S,
        window_s: float = DEFAULT_WINDOW_S,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"sample interval must be > 0 s, got {interval_s!r}")
        self.interval_s = interval_s
        self.window_s = window_s
        # long enough to judge a death as of its deadline, after the clients hear of it
        history = max(8, int(max(4 * window_s, HISTORY_S) / interval_s) + 4)
        self.watched = {pid: Watched(pid, history) for pid in dict.fromkeys(pids)}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_now(self) -> None:
        with self._lock:
            for w in self.watched.values():
                w.sample(self.watched.keys())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_now()

    def start(self) -> Sampler:
        self.sample_now()
        self._thread = threading.Thread(target=self._run, name="enginedead-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval_s + 1)

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def evidence(self, fresh: bool = True) -> dict[int, ProcessEvidence]:
        """Per process: state now (a fresh sample) and CPU use over the last window."""
        if fresh:
            self.sample_now()
        with self._lock:
            return {pid: w.evidence(self.window_s) for pid, w in self.watched.items()}

    def evidence_at(self, pid: int, t: float) -> ProcessEvidence | None:
        """``pid`` as it was at ``t`` (``time.monotonic()``): the newest sample by then."""
        with self._lock:
            w = self.watched.get(pid)
            return None if w is None else w.evidence_at(t, self.window_s)


def snapshot(pids: Iterable[int], window_s: float = 0.2) -> dict[int, ProcessEvidence]:
    """Evidence for ``pids`` over a short window, without a background thread."""
    sampler = Sampler(pids, interval_s=window_s, window_s=window_s)
    sampler.sample_now()
    time.sleep(window_s)
    return sampler.evidence()
