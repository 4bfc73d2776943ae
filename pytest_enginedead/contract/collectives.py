"""Which rank waits in a collective: written by each ``VLLM::Worker``, read by the guard and the harness.

Tensor-parallel ranks meet in collectives (all-reduce, gather) at every layer.  On CPU, vLLM's
shared-memory communicator waits for a late peer by spinning: the waiting rank uses a whole
core while it does nothing but wait, so its CPU says "computing" when its peer is the one that
computes, or hangs.  Each worker therefore marks, in a file of eight bytes it maps once, the
``time.monotonic()`` at which it entered the collective it is in (0.0 outside one).  A reader
on the same machine compares that with its own clock (``CLOCK_MONOTONIC`` is system-wide).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import time

#: one mark file per worker process, in the engine's run directory or the guard's state directory
MARK_PREFIX = "enginedead-collective-"

#: a rank inside one collective this long is waiting for a peer (healthy ones last micro- to
#: milliseconds on one machine; the guard looks every 0.25 s)
WAITING_AFTER_S = 0.2

_FORMAT = "d"
_SIZE = struct.calcsize(_FORMAT)


def mark_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{MARK_PREFIX}{pid}")


def mark_pid(name: str) -> int | None:
    """The worker's pid in a mark file's name, or None if it is not one."""
    digits = name[len(MARK_PREFIX):] if name.startswith(MARK_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


class CollectiveMark:
    """The worker's side: ``enter()`` and ``leave()`` around each collective (nesting counted)."""

    def __init__(self, directory: str) -> None:
        self.path = mark_path(directory, os.getpid())
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)  # the mapping keeps the file; no descriptor stays open
        self._depth = 0

    def enter(self) -> None:
        self._depth += 1
        if self._depth == 1:
            struct.pack_into(_FORMAT, self._map, 0, time.monotonic())

    def leave(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            struct.pack_into(_FORMAT, self._map, 0, 0.0)

    def since(self) -> float | None:
        """When this process entered the collective it is in, None if in none."""
        (value,) = struct.unpack_from(_FORMAT, self._map, 0)
        return value or None

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.remove(self.path)


def in_collective_since(directory: str, pid: int) -> float | None:
    """When worker ``pid`` entered the collective it is in (its monotonic clock), None if in none
    (or it keeps no mark: an older plugin, a rank on another machine)."""
    try:
        with open(mark_path(directory, pid), "rb") as f:
            data = f.read(_SIZE)
    except OSError:
        return None
    if len(data) != _SIZE:
        return None
    (since,) = struct.unpack(_FORMAT, data)
    return since or None


def waiting_for_a_peer(directory: str | None, pid: int, now: float | None = None) -> bool:
    """Worker ``pid`` has sat in one collective for ``WAITING_AFTER_S`` or more: its CPU is a wait."""
    if not directory:
        return False
    since = in_collective_since(directory, pid)
    now = time.monotonic() if now is None else now
    return since is not None and now - since >= WAITING_AFTER_S
