"""The reaper: a watchdog process that ends our engines if the harness's process dies first.

The harness tells it, through a registry file, each engine's processes, ``/dev/shm`` entries
and run directory, and which engines are starting; once the harness's process is gone (kill
-9, a CI job's timeout, a crash) the reaper ends them by pid (``cleanup.terminate``), with the
processes born while an engine started, before the harness knew them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import Any

import psutil

from ...process.pinned import ProcRef
from .cleanup import mapped_shm, terminate, unlink_shm

REAPER_MAIN = (
    "import sys; from pytest_enginedead.harness.engines.reaper import reaper_main; "
    "sys.exit(reaper_main(sys.argv[1:]))"
)


class Reaper:
    """A watchdog process that cleans up our engines if this process dies first.

    Its registry (a temporary JSON file) goes with it: removed by ``close``, or by the
    reaper itself once it has cleaned up after a harness that died.
    """

    def __init__(self) -> None:
        fd, self.registry = tempfile.mkstemp(prefix="enginedead-reaper-", suffix=".json")
        os.close(fd)
        #: per engine (by key): its processes, segments and run directory
        self._engines: dict[str, tuple[list[ProcRef], set[str], str | None]] = {}
        #: engines starting (by key), with this process's descendants as their start began:
        #: the processes a start makes are not known by pid until it adopts them
        self._starts: dict[str, list[ProcRef]] = {}
        self._write([], set(), [])
        me = psutil.Process()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", REAPER_MAIN, str(me.pid), repr(me.create_time()), self.registry],
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal must not reach it
        )

    def _write(self, refs: Iterable[ProcRef], shm: set[str], dirs: Iterable[str]) -> None:
        older = {r for refs_ in self._starts.values() for r in refs_}
        data = {"procs": [[r.pid, r.create_time] for r in refs], "shm": sorted(shm), "dirs": sorted(dirs),
                "starting": bool(self._starts), "older": [[r.pid, r.create_time] for r in older]}
        tmp = self.registry + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.registry)

    def track(self, key: str, refs: Iterable[ProcRef], shm: set[str], run_dir: str | None = None) -> None:
        """What to clean up of engine ``key`` if we die: its processes, segments, run directory."""
        self._engines[key] = (list(refs), set(shm), run_dir)
        self._flush()

    @contextlib.contextmanager
    def starting(self, key: str) -> Iterator[None]:
        """While engine ``key`` starts, before ``track`` knows its processes by pid: the reaper
        keeps each process this one starts meanwhile, so a harness killed mid-start (kill -9, a
        CI job's timeout) leaves no engine behind."""
        self._starts[key] = [ProcRef.of(p) for p in _descendants(psutil.Process())]
        self._flush()
        try:
            yield
        finally:
            del self._starts[key]
            self._flush()

    def forget(self, key: str) -> None:
        """Engine ``key`` was stopped and cleaned up by us."""
        if self._engines.pop(key, None) is not None:
            self._flush()

    def _flush(self) -> None:
        refs = [r for procs, _, _ in self._engines.values() for r in procs]
        shm = set().union(*(s for _, s, _ in self._engines.values()))
        dirs = [d for _, _, d in self._engines.values() if d]
        self._write(refs, shm, dirs)

    def __enter__(self) -> Reaper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        _remove_registry(self.registry)
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=3)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def _read(registry: str) -> dict[str, Any] | None:
    try:
        with open(registry) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _reap(registry: str, started: Iterable[ProcRef] = ()) -> None:
    """End what the registry lists and ``started`` (seen while engines started), by pid."""
    data = _read(registry)
    if data is None:
        _remove_registry(registry)
        terminate(started, grace_s=2.0)
        return
    refs = [ProcRef(int(pid), float(ct)) for pid, ct in data.get("procs", [])] + list(started)
    shm = set(data.get("shm", [])) | mapped_shm(refs)
    terminate(refs, grace_s=2.0, shm=shm)
    unlink_shm(shm)
    for run_dir in data.get("dirs", []):
        if os.path.basename(str(run_dir)).startswith("enginedead-"):  # only our run directories
            shutil.rmtree(str(run_dir), ignore_errors=True)
    _remove_registry(registry)


def _remove_registry(registry: str) -> None:
    """The registry and a half-written update of it (the harness may die mid-write)."""
    for path in (registry, registry + ".tmp"):
        with contextlib.suppress(OSError):
            os.unlink(path)


def reaper_main(argv: list[str]) -> int:
    """The reaper: ``reaper_main([PID, CREATE_TIME, REGISTRY])`` (see ``REAPER_MAIN``)."""
    parent = ProcRef(int(argv[0]), float(argv[1]))
    registry = argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    started: dict[int, ProcRef] = {}  # the harness's processes born while an engine started
    while os.path.exists(registry):
        proc = parent.process()
        if proc is None:
            _reap(registry, started.values())
            return 0
        data = _read(registry)
        if data and data.get("starting"):
            older = {ProcRef(int(pid), float(ct)) for pid, ct in data.get("older", [])}
            started.update((p.pid, ref) for p in _descendants(proc)
                           if p.pid != os.getpid() and (ref := _ref(p)) is not None and ref not in older)
        time.sleep(0.25)
    return 0


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    """``proc``'s processes and theirs, as they are now (none if it is gone)."""
    with contextlib.suppress(psutil.Error):
        return list(proc.children(recursive=True))
    return []


def _ref(proc: psutil.Process) -> ProcRef | None:
    with contextlib.suppress(psutil.Error):
        return ProcRef.of(proc)
    return None


if __name__ == "__main__":
    raise SystemExit(reaper_main(sys.argv[1:]))
