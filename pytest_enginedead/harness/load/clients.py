"""The clients of a served engine: concurrent OpenAI requests, and what they saw.

The requests run on an event loop of their own thread while the caller waits, so a
Ctrl-C still reaches the caller at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from ...logic.words import plural
from ..waiting import interruptible


@dataclass
class ClientOutcome:
    """What the clients of one ``complete()`` saw."""

    requests: int
    failures: Counter[str]
    at: float

    def describe(self) -> str:
        if not self.failures:
            return f"{plural(self.requests, 'request')}: all completed"
        failed = sum(self.failures.values())
        kinds = ", ".join(f"{n} with {kind}" for kind, n in self.failures.most_common())
        done = self.requests - failed
        completed = f"{done} completed, " if done > 0 else ""
        return f"{plural(self.requests, 'request')}: {completed}{failed} failed ({kinds})"


def describe_client_error(exc: BaseException) -> str:
    """``HTTP 500 InternalServerError``, ``APIConnectionError``, ``APIError in a stream``…"""
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if status is not None:
        return f"HTTP {status} {name}"
    return name


_T = TypeVar("_T")


def run_async(coro: Coroutine[Any, Any, _T], cancel_wait_s: float = 2.0) -> _T:
    """Run a coroutine to completion on an event loop of its own thread; this thread waits.

    The waiting thread stays interruptible (``interruptible``): Ctrl-C raises here at
    once, whatever the clients' libraries make of a task's cancellation (``asyncio.run``
    in the main thread only *cancels* its task on SIGINT, and a request stack that takes
    the cancellation in lets the run go on as if nothing was pressed).  Then the clients'
    task is cancelled and given ``cancel_wait_s``.
    """
    loop = asyncio.new_event_loop()
    task = loop.create_task(coro)
    done = threading.Event()

    def run() -> _T:
        try:
            return loop.run_until_complete(task)
        finally:
            _close_loop(loop)
            done.set()

    def cancel() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(task.cancel)
        done.wait(cancel_wait_s)

    return interruptible(run, "enginedead-clients", on_interrupt=cancel)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on ``loop``, finish its async generators, close it."""
    with contextlib.suppress(Exception):
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in left:
            t.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


