"""Where a worker's step was: its Python stack on the harness's signal, and at the deadline.

``StackDumps`` keeps a worker's two stack files: ``stack-<pid>.txt``, which faulthandler writes
on ``SIGUSR2`` (the harness asks), and ``deadline-stack-<pid>.txt``, which ``DeadlineWatch``
writes when a phase of a step reaches the deadline in force, with samples of the step until
then.  The formats are ``contract.dumps``'s, shared with the harness that reads them.
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import sys
import threading
import time
from typing import IO

from ..contract.dumps import (
    MAIN_THREAD_PREFIX,
    STACK_SIGNAL,
    DeadlineStack,
    deadline_stack_path,
    sample_block,
    stack_path,
)

#: The watchdog looks at the armed phase at least this often (a deadline is >= 1 s).
WATCH_EVERY_S = 0.25

#: Until the deadline, the main thread's stack is sampled ``SAMPLES_PER_DEADLINE`` times,
#: evenly from the phase's start (never more often than ``SAMPLE_EVERY_S``): one frame at
#: one instant says where one lucky moment was, and a second before the deadline covers
#: one layer or two of a model; samples across the step say where it spends its time.
SAMPLE_EVERY_S = 0.05

SAMPLES_PER_DEADLINE = 20

#: The watchdog's own clock, whatever a test does to this module's ``time``.
_monotonic = time.monotonic


def _every(deadline_s: float) -> float:
    """Seconds between two samples of a phase under this deadline."""
    return max(SAMPLE_EVERY_S, deadline_s / SAMPLES_PER_DEADLINE)


class DeadlineWatch:
    """The worker's own stack when the phase in progress reaches its deadline.

    The step's thread only *arms* a phase (one tuple assignment at its start, one at
    its end: no syscall, no wake-up).  A daemon thread looks at the armed phase at least
    every ``WATCH_EVERY_S`` and sleeps until it is due: until the deadline it samples the
    main thread's frames ``SAMPLES_PER_DEADLINE`` times, evenly, and at the
    deadline, if the same phase still runs, writes every thread's stack (faulthandler)
    with the samples and a header naming the step; then again a deadline later.  A phase
    that ends first costs nothing more.  The file is replaced whole: a reader sees one
    complete dump (``read_deadline_stack``).
    """

    def __init__(self, path: str, main_ident: int) -> None:
        self.path = path
        self._ident = main_ident
        self._main = f"{MAIN_THREAD_PREFIX}0x{main_ident:016x}\n"
        #: (step, phase, started, deadline_s) of the phase in progress, or None
        self.armed: tuple[int, str, float, float] | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="enginedead-deadline", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.armed = None
        self._closed.set()

    def _run(self) -> None:
        current: tuple[int, str, float, float] | None = None
        samples: list[str] = []
        deadline_at = next_at = math.inf
        while not self._closed.is_set():
            armed = self.armed
            if armed is not current:
                current, samples = armed, []
                deadline_at = armed[2] + armed[3] if armed else math.inf
                next_at = armed[2] + _every(armed[3]) if armed else math.inf
            now = _monotonic()
            if current is not None and now >= next_at:
                if now >= deadline_at:
                    self._dump(current, now, samples)
                    samples = []
                    deadline_at += current[3]
                    next_at = now + _every(current[3])
                else:
                    samples.append(self._sample(deadline_at - now))
                    next_at = min(now + _every(current[3]), deadline_at)
                continue
            self._closed.wait(max(0.0, min(next_at - now, WATCH_EVERY_S)))

    def _sample(self, before_s: float) -> str:
        """The main thread's frames now, innermost first, as faulthandler writes them."""
        frame = sys._current_frames().get(self._ident)
        lines: list[str] = []
        while frame is not None and len(lines) < 200:
            code = frame.f_code
            lines.append(f'  File "{code.co_filename}", line {frame.f_lineno} in {code.co_name}')
            frame = frame.f_back
        return sample_block(before_s, lines)

    def _dump(self, phase: tuple[int, str, float, float], now: float, samples: list[str]) -> None:
        step, name, started, deadline = phase
        head = DeadlineStack(step, name, deadline, now - started, now, "", ()).header(len(samples))
        tmp = f"{self.path}.tmp"
        with contextlib.suppress(OSError):
            with open(tmp, "w") as f:
                f.write(head + self._main)
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
                f.write("".join(samples))
            os.replace(tmp, self.path)


class StackDumps:
    """A worker's stack files for its life: the dump on the harness's signal, and (with
    ``deadline_stacks``) the dump at each step's deadline."""

    def __init__(self, run_dir: str, pid: int, deadline_stacks: bool) -> None:
        main = threading.main_thread().ident or 0
        # kept open for the process's life: faulthandler writes into it on a signal
        self._stack: IO[str] = open(stack_path(run_dir, pid), "w")  # noqa: SIM115
        # the harness picks the main thread's frames out of an all-threads dump
        self._stack.write(f"{MAIN_THREAD_PREFIX}0x{main:016x}\n")
        self._stack.flush()
        faulthandler.register(STACK_SIGNAL, file=self._stack, all_threads=True)
        self._watch = DeadlineWatch(deadline_stack_path(run_dir, pid), main) if deadline_stacks else None

    def arm(self, step: int, phase: str, began: float, deadline_s: float) -> None:
        """A phase of ``step`` began at ``began``: dump the stack if it reaches ``deadline_s``."""
        if self._watch is not None:
            self._watch.armed = (step, phase, began, deadline_s)

    def disarm(self) -> None:
        """The phase ended."""
        if self._watch is not None:
            self._watch.armed = None

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        faulthandler.unregister(STACK_SIGNAL)
        self._stack.close()
