"""Waiting, one way: for a condition (``wait_until``: every deadline loop of the harness), for
work on a thread of its own without losing Ctrl-C, with progress while it runs.

vLLM's client blocks its caller where a signal's exception is lost; the harness runs such
calls on a daemon thread and waits for them in a loop that stays interruptible.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar


def never() -> bool:
    """A ``give_up`` that never gives up: the wait lasts until done or its time is out."""
    return False


def wait_until(
    done: Callable[[], bool], timeout_s: float, give_up: Callable[[], bool] = never, *,
    every_s: float = 0.05, meanwhile: Callable[[], None] | None = None,
) -> bool:
    """Whether ``done()`` came within ``timeout_s``: asked at once, then every ``every_s``.

    Ends sooner once ``give_up()`` is true.  ``meanwhile()`` runs between two looks (a
    sample, a restart, a progress line); the looks keep their cadence whatever it costs,
    as long as it costs less than ``every_s``.  The last word is ``done()``'s, asked once
    more when the time is out.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    looks = 0
    while not done():
        if give_up() or time.monotonic() >= deadline:
            return done()
        if meanwhile is not None:
            meanwhile()
        looks += 1
        time.sleep(max(0.0, min(start + looks * every_s, deadline) - time.monotonic()))
    return True


class Progress(Protocol):
    """Where start-up progress goes; ``done`` ends the run of progress lines."""

    def __call__(self, message: str, done: bool = False) -> None: ...


class Ticker:
    """Reports "still starting … N s" every ``every_s`` while the body runs."""

    def __init__(self, progress: Progress | None, what: str, t0: float, every_s: float = 15.0):
        self.progress, self.what, self.t0, self.every_s = progress, what, t0, every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        assert self.progress is not None
        while not self._stop.wait(self.every_s):
            self.progress(f"{self.what}: {time.monotonic() - self.t0:.0f} s so far")

    def __enter__(self) -> Ticker:
        if self.progress is not None:
            self.progress(self.what)
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)


_T = TypeVar("_T")


def interruptible(fn: Callable[[], _T], name: str, on_interrupt: Callable[[], None] | None = None) -> _T:
    """``fn()``, run on a thread of its own while this thread waits for it.

    The waiting thread stays interruptible: Ctrl-C (or pytest-timeout's alarm) raises
    here at once.  vLLM's client blocks its caller where a signal's exception is lost:
    in 0.32.0 the wait for the engine core to start is a pyzmq poll, which takes the
    interrupted call up again instead of raising ``KeyboardInterrupt``, so a Ctrl-C
    waited out the whole start.  On an exception while waiting ``on_interrupt`` runs
    and the exception propagates; the thread is a daemon and ends with what it waits on.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.25)
    except BaseException:
        if on_interrupt is not None:
            on_interrupt()
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def bounded(fn: Callable[[], None], timeout_s: float, give_up: Callable[[], bool]) -> None:
    """Run ``fn`` on a daemon thread; stop waiting after ``timeout_s``, or once ``give_up()``."""
    thread = threading.Thread(target=_quiet, args=(fn,), daemon=True)
    thread.start()
    wait_until(lambda: not thread.is_alive(), timeout_s, give_up)


def _quiet(fn: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        fn()
