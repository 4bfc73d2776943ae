"""pytest-xdist: a CPU budget per worker, one worker per engine config, one report.

Workers send what their engines found through ``workeroutput``; the controller
merges it, so the terminal summary and the JSON report are one table, one file.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest

from .engine import EngineSpec

WIRE_KEY = "enginedead"


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def worker_index(config: pytest.Config) -> tuple[int, int] | None:
    """(index, count) of this xdist worker, or None outside xdist."""
    info = getattr(config, "workerinput", None)
    if not info:
        return None
    worker_id = str(info.get("workerid", "gw0"))
    count = int(info.get("workercount", 1) or 1)
    try:
        return int(worker_id.removeprefix("gw")), count
    except ValueError:
        return 0, count


def cpu_bind(config: pytest.Config, cpus: list[int] | None = None) -> str | None:
    """The cores this worker's engines may use: the allowed CPUs split between workers.

    ``VLLM_CPU_OMP_THREADS_BIND`` syntax (``"0"``, ``"2,3"``).  Outside xdist, None:
    vLLM decides.  With more workers than cores, workers share round-robin.
    """
    where = worker_index(config)
    if where is None:
        return None
    index, count = where
    if cpus is None:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if count >= len(cpus):
        return str(cpus[index % len(cpus)])
    per = len(cpus) // count
    return ",".join(str(c) for c in cpus[index * per : (index + 1) * per])


def group_name(spec: EngineSpec) -> str:
    """One xdist group per engine configuration (stable across workers)."""
    digest = hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
    return f"enginedead-bs{spec.max_num_seqs}-{digest}"


def dist_note(config: pytest.Config) -> str | None:
    """Say so when xdist runs without --dist loadgroup (engines would start per worker)."""
    if not config.pluginmanager.hasplugin("xdist") or is_worker(config):
        return None
    numprocesses = getattr(config.option, "numprocesses", None)
    dist = getattr(config.option, "dist", "no")
    if numprocesses and dist not in ("loadgroup", "no"):
        return (
            f"--dist {dist}: tests that share an engine may land on different workers, "
            "each starting its own; use --dist loadgroup"
        )
    return None


def send(config: pytest.Config, wire: str) -> None:
    config.workeroutput[WIRE_KEY] = wire  # type: ignore[attr-defined]


class ControllerHooks:
    """xdist hooks, registered only where xdist is loaded (they are xdist's hookspecs)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        from .plugin import run_key  # the controller's run state

        run = self.config.stash.get(run_key, None)
        if run is None:
            return
        output = getattr(node, "workeroutput", None) or {}
        worker = str(getattr(node, "gateway", None) and node.gateway.id or "?")
        run.results.absorb(output.get(WIRE_KEY), worker)
