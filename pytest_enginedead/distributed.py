"""pytest-xdist: a CPU budget per worker, one worker per engine config, one report.

Grouping: with ``--dist loadgroup`` every test that shares an engine configuration
goes to the same worker.  xdist's own loadgroup reads groups from node ids it
rewrites, which pytest 9.2's structured ids no longer allow (pytest-xdist#1386),
so the plugin brings its scheduler: each worker writes ``{nodeid: group}`` to its
own file, the controller's scheduler reads them.  User ``xdist_group`` marks count
too.  Workers send what their engines found through ``workeroutput``; the
controller merges it, so the terminal summary and the JSON report are one table,
one file.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import Any

import pytest

from .planning import EngineSpec
from .report import Results

WIRE_KEY = "enginedead"
GROUPS_KEY = "enginedead_groups_dir"


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
        cpus = (sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else list(range(os.cpu_count() or 1)))
    if count >= len(cpus):
        return str(cpus[index % len(cpus)])
    per = len(cpus) // count
    return ",".join(str(c) for c in cpus[index * per : (index + 1) * per])


def group_name(spec: EngineSpec) -> str:
    """One xdist group per engine configuration (stable across workers)."""
    digest = hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
    return f"enginedead-bs{spec.max_num_seqs}-{digest}"


def item_group(item: pytest.Item, spec: EngineSpec | None) -> str | None:
    """The scheduling group of a test: its engine config, joined with any xdist_group."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")}
    if spec is not None:
        names.add(group_name(spec))
    return "_".join(sorted(names)) or None


def publish_groups(config: pytest.Config, groups: Iterable[tuple[str, str | None]]) -> None:
    """On a worker: write ``{nodeid: group}`` where the controller's scheduler reads it."""
    info = getattr(config, "workerinput", None) or {}
    directory = info.get(GROUPS_KEY)
    if not directory:
        return
    mapping = {nodeid: group for nodeid, group in groups if group}
    path = os.path.join(directory, f"{info.get('workerid', 'gw')}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(mapping, f)
    os.replace(path + ".tmp", path)  # one file per worker: no two writers


def make_scheduler(config: pytest.Config, log: Any, directory: str) -> Any:
    from xdist.scheduler.loadscope import LoadScopeScheduling

    class EngineGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """loadscope where the scope is the test's group (or the test itself)."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                merged: dict[str, str] = {}
                for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
                    with open(path) as f:
                        merged.update(json.load(f))
                self._groups = merged
            group = self._groups.get(nodeid)
            if group:
                return group
            at, bracket = nodeid.rfind("@"), nodeid.rfind("]")
            return nodeid[at + 1 :] if at > bracket else nodeid  # xdist's own suffix, older pytest

    return EngineGroupScheduling(config, log)


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

    def __init__(self, results: Results) -> None:
        self.results = results  # the controller's: workers' results merge into it
        self.groups_dir: str | None = None

    def pytest_configure_node(self, node: Any) -> None:
        if self.groups_dir is None:
            self.groups_dir = tempfile.mkdtemp(prefix="enginedead-groups-")
        node.workerinput[GROUPS_KEY] = self.groups_dir

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadgroup" or self.groups_dir is None:
            return None
        return make_scheduler(config, log, self.groups_dir)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.groups_dir:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.groups_dir)

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        worker = str((getattr(node, "gateway", None) and node.gateway.id) or "?")
        self.results.absorb(output.get(WIRE_KEY), worker)
