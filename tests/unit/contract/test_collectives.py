"""The collective marks: a worker's eight bytes saying since when it sits in a collective."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from pytest_enginedead.contract.collectives import (
    WAITING_AFTER_S,
    CollectiveMark,
    in_collective_since,
    mark_path,
    mark_pid,
    waiting_for_a_peer,
)
from pytest_enginedead.invllm import collectives


def test_a_mark_says_since_when_and_nesting_leaves_once(tmp_path: Path) -> None:
    d, pid = str(tmp_path), os.getpid()
    mark = CollectiveMark(d)
    assert in_collective_since(d, pid) is None and not waiting_for_a_peer(d, pid)
    before = time.monotonic()
    mark.enter()
    mark.enter()  # a collective inside a collective (a gather built on an all-gather)
    since = in_collective_since(d, pid)
    assert since is not None and before <= since <= time.monotonic()
    assert not waiting_for_a_peer(d, pid)  # just entered: the exchange itself
    assert waiting_for_a_peer(d, pid, now=since + WAITING_AFTER_S + 1e-6)  # (a + 0.2) - a may be < 0.2
    mark.leave()
    assert in_collective_since(d, pid) == since  # still inside the outer one
    mark.leave()
    assert in_collective_since(d, pid) is None
    assert mark_pid(os.path.basename(mark_path(d, pid))) == pid and mark_pid("guard-1.json") is None
    mark.remove()
    assert not os.path.exists(mark_path(d, pid)) and in_collective_since(d, pid) is None
    assert not waiting_for_a_peer(None, pid) and in_collective_since(str(tmp_path / "none"), pid) is None


def test_a_wrapped_collective_is_marked_while_it_runs_and_after_it_raises(tmp_path: Path) -> None:
    seen = []

    def all_reduce(x: int) -> int:
        seen.append(in_collective_since(str(tmp_path), os.getpid()))
        if x < 0:
            raise ValueError(x)
        return x

    old = collectives._directory, collectives._mark
    collectives._directory, collectives._mark = str(tmp_path), None
    try:
        wrapped = collectives._wrap(all_reduce)
        assert wrapped(3) == 3 and getattr(wrapped, "__enginedead__", False)
        with contextlib.suppress(ValueError):
            wrapped(-1)
        assert None not in seen and len(seen) == 2
        assert in_collective_since(str(tmp_path), os.getpid()) is None  # left, even on an error
    finally:
        if collectives._mark is not None:
            collectives._mark.remove()
        collectives._directory, collectives._mark = old
