"""The stacks a worker dumps: on the harness's signal, and at a step's deadline."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

#: The harness asks a worker for its Python stack with this signal.
STACK_SIGNAL = signal.SIGUSR2


def stack_path(run_dir: str, pid: int) -> str:
    """Where one worker's faulthandler writes its stack on ``STACK_SIGNAL``."""
    return os.path.join(run_dir, f"stack-{pid}.txt")


#: The first line of a stack file names the main thread, to pick it out of a dump.
MAIN_THREAD_PREFIX = "main-thread "


def deadline_stack_path(run_dir: str, pid: int) -> str:
    """The worker's own stack at the deadline of its latest step that outlived it."""
    return os.path.join(run_dir, f"deadline-stack-{pid}.txt")


#: The first line of a deadline stack: ``deadline-stack step=12 phase=execute_model ...``.
DEADLINE_HEADER = "deadline-stack"

#: Each sample of the main thread before the deadline starts with this line.
SAMPLE_HEADER = "sample "


def sample_block(before_s: float, frames: list[str]) -> str:
    """One sample in a deadline stack: a header line, then its frames as faulthandler writes them."""
    return f"{SAMPLE_HEADER}{before_s:.3f} s before the deadline\n" + "".join(f"{ln}\n" for ln in frames)


@dataclass(frozen=True)
class DeadlineStack:
    """A stack the worker dumped itself when one of its steps reached the deadline in force."""

    step: int
    phase: str  # "execute_model" / "sample_tokens"
    deadline_s: float
    ran_s: float  # how long the phase had run when the dump was taken
    at: float  # time.monotonic() of the dump
    text: str  # MAIN_THREAD_PREFIX line + faulthandler's all-threads dump, at the deadline
    #: the main thread's frames sampled during the step until the dump (``sample_block``s)
    samples: tuple[str, ...] = ()

    def header(self, samples: int = 0) -> str:
        return (
            f"{DEADLINE_HEADER} step={self.step} phase={self.phase} deadline={self.deadline_s:g} "
            f"ran={self.ran_s:.6f} at={self.at:.6f} samples={samples}\n"
        )


def read_deadline_stack(path: str) -> DeadlineStack | None:
    """The latest deadline stack of one worker, or None (none written, or unreadable)."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        with open(path) as f:
            first = f.readline()
            rest = f.read()
        if not first.startswith(DEADLINE_HEADER):
            return None
        words = dict(w.split("=", 1) for w in first.split()[1:])
        text, *samples = rest.split("\n" + SAMPLE_HEADER)
        return DeadlineStack(
            int(words["step"]), words["phase"], float(words["deadline"]), float(words["ran"]),
            float(words["at"]), text + "\n", tuple(SAMPLE_HEADER + s for s in samples),
        )
    return None
