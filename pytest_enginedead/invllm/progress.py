"""A worker's progress, published where the other nodes can read it (``contract.progress``).

Runs in ``VLLM::Worker`` when ``ENGINEDEAD_PROGRESS_DIR`` is set (the harness sets it for an
engine on several nodes; a production cluster sets it on every machine).  A daemon thread
rewrites the rank's record every ``PUBLISH_EVERY_S`` — its step as the step recorder
knows it, the CPU seconds of its process tree and its CPU use over its last second — and
answers stack requests.  It never waits on the step: a step that computes for minutes
keeps publishing (the step's own thread holds the GIL only between bytecodes), and a
process that is gone stops, which is what readers judge as gone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

import psutil

from ..contract.dumps import MAIN_THREAD_PREFIX
from ..contract.progress import (
    CPU_WINDOW_S,
    PUBLISH_EVERY_S,
    REQUEST_EVERY_S,
    RankProgress,
    read_request,
    write_progress,
    write_stack_answer,
)
from ..contract.stepprogress import StepProgress
from ..process import reading
from . import collectives


@dataclass(frozen=True)
class StepState:
    """Where a rank's steps stand (what the step recorder knows)."""

    step: int = 0
    batch: int = 0
    running: bool = False
    began: float = 0.0  # time.monotonic() the running (or latest) step began
    last_s: float = 0.0  # how long the latest finished step took
    finished: int = 0


class StepSource(Protocol):
    def step_state(self) -> StepState: ...

    def step_progress(self) -> StepProgress | None: ...


def thread_stacks(main_ident: int | None = None) -> str:
    """Every thread's Python frames, innermost first, as faulthandler writes them (with the main
    thread named first, as the worker's stack files are)."""
    main = main_ident if main_ident is not None else (threading.main_thread().ident or 0)
    out = [f"{MAIN_THREAD_PREFIX}0x{main:016x}\n"]
    for ident, frame in sys._current_frames().items():
        head = "Current thread" if ident == threading.get_ident() else "Thread"
        out.append(f"{head} 0x{ident:016x} (most recent call first):\n")
        depth = 0
        walk: FrameType | None = frame
        while walk is not None and depth < 200:
            code = walk.f_code
            out.append(f'  File "{code.co_filename}", line {walk.f_lineno} in {code.co_name}\n')
            walk = walk.f_back
            depth += 1
        out.append("\n")
    return "".join(out)


def _layer_fields(p: StepProgress | None, now: float) -> dict[str, Any]:
    """A rank's step progress and collective as a record carries them: ages, not its clock's times."""
    since = collectives.since()
    fields: dict[str, Any] = {"in_collective_s": round(now - since, 3) if since else -1.0}
    if p is None:
        return fields
    return fields | {
        "layered": True, "phase": int(p.phase), "layer": p.layer, "layers": p.layers,
        "forward_done": p.forward_done, "stalled_s": round(p.stalled_s(now), 3),
        "forward_s": round(now - p.forward_at, 3) if p.forward_at else 0.0, "pace_s": round(p.pace_s, 3),
        "tail": round(p.tail, 3),
    }


class Publisher:
    """One rank's publisher: its record every ``every_s``, its stack when asked."""

    def __init__(
        self, directory: str, node: int, rank: int, source: StepSource,
        every_s: float = PUBLISH_EVERY_S, request_every_s: float = REQUEST_EVERY_S,
        clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
        cpu: Callable[[], float] | None = None, start: bool = True,
    ) -> None:
        self.directory = directory
        self.node, self.rank = node, rank
        self.source = source
        self.every_s, self.request_every_s = every_s, request_every_s
        self._clock, self._wall = clock, wall
        me = psutil.Process()
        self._cpu = cpu or (lambda: reading.cpu_seconds(me))
        self.pid = os.getpid()
        self.title = reading.title(me)
        self.host = socket.gethostname()
        self.seq = 0
        self._samples: deque[tuple[float, float]] = deque()
        self._answered: str | None = read_request(directory, node, rank)  # an older request is not ours
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="enginedead-progress", daemon=True)
        if start:
            self._thread.start()

    def record(self, ended: bool = False) -> RankProgress:
        """The rank's record now (one more in the sequence)."""
        now = self._clock()
        cpu = self._cpu()
        self._samples.append((now, cpu))
        while len(self._samples) > 2 and now - self._samples[1][0] >= CPU_WINDOW_S:
            self._samples.popleft()
        t0, cpu0 = self._samples[0]
        window = now - t0
        cores = max(0.0, (cpu - cpu0) / window) if window > 0 else 0.0
        state = self.source.step_state()
        ran = (now - state.began) if state.running else state.last_s
        self.seq += 1
        return RankProgress(
            node=self.node, rank=self.rank, pid=self.pid, title=self.title, host=self.host,
            seq=self.seq, wall=self._wall(), mono=now, cpu_s=round(cpu, 3), cores=round(cores, 3),
            window_s=round(window, 3), step=state.step, batch=state.batch, running=state.running,
            ran_s=round(max(0.0, ran), 3), steps=state.finished, ended=ended,
            **_layer_fields(self.source.step_progress(), now),
        )

    def publish(self, ended: bool = False) -> None:
        with contextlib.suppress(OSError):
            write_progress(self.directory, self.record(ended))

    def answer(self) -> bool:
        """Answer a new stack request, if there is one; whether it did."""
        token = read_request(self.directory, self.node, self.rank)
        if token is None or token == self._answered:
            return False
        self._answered = token
        with contextlib.suppress(OSError):
            write_stack_answer(self.directory, self.node, self.rank, token, thread_stacks())
        return True

    def _run(self) -> None:
        due = self._clock()
        while True:
            now = self._clock()
            if now >= due:
                self.publish()
                due = max(due + self.every_s, now)
            self.answer()
            if self._closed.wait(min(self.request_every_s, max(0.0, due - self._clock()))):
                return

    def close(self) -> None:
        """Stop publishing; the last record says the rank is exiting."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        self.publish(ended=True)
