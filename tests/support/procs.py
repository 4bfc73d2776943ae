"""Real worker processes for the liveness and false-death tests: no vLLM, no mocks.

A "worker" is a Python subprocess (this file, run as a script) that, like vLLM's
``VLLM::Worker``, owes its caller one reply.  It either computes (a Python busy
loop), idles (sleeps), or exits at once.  ``call_worker`` is the "API side": it
waits for the reply with a fixed deadline and, when the deadline passes, raises a
stand-in for ``EngineDeadError``,
which is exactly the control flow of vLLM's execute-model RPC.

This file is also copied into ``pytester`` directories, so it imports nothing from
the test suite.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

MODES = ("busy", "idle", "exit", "stray")

#: a "stray" worker sleeps, waking once a second to use this much CPU: under 5 % of a core
#: over any second, as a sleeping vLLM worker's housekeeping (its polling threads, the
#: plugin's deadline sampler) is
STRAY_BURST_S, STRAY_EVERY_S = 0.015, 1.0


class StandInError(RuntimeError):
    """Stands in for vLLM's ``EngineDeadError`` (the API side's verdict on a timeout)."""


@dataclass
class FakeEngine:
    """An engine as ``assert_no_false_death`` sees it: its process ids (all it needs).

    ``note_death`` is optional for an engine; here it keeps each verdict for the test.
    """

    pids: list[int] = field(default_factory=list)
    deaths: list[dict[str, Any]] = field(default_factory=list)

    def note_death(self, finding: dict[str, Any]) -> None:
        self.deaths.append(finding)


@contextmanager
def worker(mode: str, seconds: float = 30.0) -> Iterator[subprocess.Popen[bytes]]:
    """Start a worker in ``mode`` (busy / idle / exit); always killed and reaped after."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), mode, str(seconds)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()


def call_worker(
    proc: subprocess.Popen[bytes],
    deadline_s: float = 2.0,
    raised: list[BaseException] | None = None,
) -> bytes:
    """The API side: the worker's reply, or ``StandInError`` once ``deadline_s`` passed.

    A worker that closed its end without replying is no reply either: like vLLM, the
    caller only notices when the deadline fires.  The error raised is appended to
    ``raised`` first, so a test can check that the very same object reached it.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    end = time.monotonic() + deadline_s
    buf = b""
    eof = False
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        if eof:
            time.sleep(left)
            continue
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            eof = True
            continue
        buf += chunk
        if buf.endswith(b"\n"):
            return buf
    err = StandInError(f"RPC call to execute_model timed out after {deadline_s:g} s.")
    if raised is not None:
        raised.append(err)
    raise err


def wait_for_cpu(pid: int, cpu_s: float = 0.05, timeout_s: float = 10.0) -> None:
    """Block until ``pid`` has used ``cpu_s`` of CPU (it has started computing)."""
    import psutil

    proc = psutil.Process(pid)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        t = proc.cpu_times()
        if t.user + t.system >= cpu_s:
            return
        time.sleep(0.01)
    raise TimeoutError(f"pid {pid} did not start computing within {timeout_s} s")


def wait_until_idle(pid: int, timeout_s: float = 10.0) -> None:
    """Block until ``pid`` is asleep (its interpreter finished starting up)."""
    import psutil

    proc = psutil.Process(pid)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.status() == psutil.STATUS_SLEEPING:
            before = proc.cpu_times()
            time.sleep(0.1)
            after = proc.cpu_times()
            if (after.user + after.system) - (before.user + before.system) < 0.005:
                return
        time.sleep(0.01)
    raise TimeoutError(f"pid {pid} did not go idle within {timeout_s} s")


def main(argv: list[str]) -> int | str:
    """The worker itself: ``python procs.py MODE SECONDS``; replies unless it exits."""
    mode, seconds = argv[0], float(argv[1])
    if mode == "exit":
        return 0
    end = time.monotonic() + seconds
    if mode == "busy":
        x = 0
        while time.monotonic() < end:
            x += 1
    elif mode == "idle":
        time.sleep(seconds)
    elif mode == "stray":
        while time.monotonic() < end:
            woke = time.process_time()
            while time.process_time() - woke < STRAY_BURST_S:
                pass
            time.sleep(STRAY_EVERY_S)
    else:
        return f"unknown mode {mode!r}"
    sys.stdout.write("reply\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
