"""In ``VLLM::Worker``: mark the time this rank spends inside collectives (``contract.collectives``).

A rank that waits for a late peer in vLLM's CPU communicator spins on a core; the mark is how
the guard and the harness tell that wait from work.  Installed under the harness (its run
directory) or the guard (its state directory); inert otherwise.
"""

from __future__ import annotations

import atexit
import functools
import importlib
from collections.abc import Callable
from typing import Any

from ..compat import in_worker
from ..contract.collectives import CollectiveMark

_mark: CollectiveMark | None = None
_directory: str | None = None


def _get_mark() -> CollectiveMark | None:
    """This process's mark, made at its first collective (a spawned worker, not its parent)."""
    global _mark
    if _mark is None and _directory is not None:
        try:
            _mark = CollectiveMark(_directory)
        except OSError:
            return None
        atexit.register(_mark.remove)
    return _mark


def since() -> float | None:
    """When this worker entered the collective it is in (``time.monotonic()``), None if in none."""
    return _mark.since() if _mark is not None else None


def _wrap(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def collective(*args: Any, **kwargs: Any) -> Any:
        mark = _get_mark()
        if mark is None:
            return method(*args, **kwargs)
        mark.enter()
        try:
            return method(*args, **kwargs)
        finally:
            mark.leave()

    collective.__enginedead__ = True  # type: ignore[attr-defined]
    return collective


def install(directory: str) -> list[str]:
    """Wrap the CPU communicator's collectives; the names wrapped (none if vLLM has no such class)."""
    global _directory
    _directory = directory
    module_name, class_name = in_worker.CPU_COMMUNICATOR
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return []
    wrapped = []
    for name in in_worker.CPU_COLLECTIVES:
        method = getattr(cls, name, None)
        if callable(method) and not getattr(method, "__enginedead__", False):
            setattr(cls, name, _wrap(method))
            wrapped.append(name)
    return wrapped
