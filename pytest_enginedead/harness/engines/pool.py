"""The engines alive in this process: start on demand, share by spec, stop.

Engines are expensive (~15-45 s each on 2 cores), so the pool starts one per
distinct ``EngineSpec`` (what vLLM fixes at start), tells it each test's deadline
and faults, reuses it for every test that needs it, keeps at most ``max_alive``
running, and replaces an engine once a call on it failed (a restart).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...logic.planning.engines import DeadlineAndFaults, EngineSpec
from ..waiting import Progress
from . import cleanup
from .base import EngineBase
from .cleanup import ProcessesSurvived, Survivor
from .coreready import GuardRefused
from .offline import Engine
from .reaper import Reaper
from .server import Server


@dataclass
class EngineRecord:
    """One engine this pool started, the tests that used it, and how its stop went."""

    spec: EngineSpec
    engine: EngineBase
    tests: list[str] = field(default_factory=list)
    #: started because the engine before it for this spec had died
    restart: bool = False
    #: its processes that outlived SIGKILL (none, unless the kernel could not take them)
    survivors: list[Survivor] = field(default_factory=list)


class EnginePool:
    """Starts engines on demand, shares them by spec, never runs more than ``max_alive``."""

    def __init__(self, max_alive: int = 1, progress: Progress | None = None) -> None:
        self.max_alive = max_alive
        self.progress = progress
        self._live: dict[EngineSpec, EngineBase] = {}
        self._records: list[EngineRecord] = []
        self._died: set[EngineSpec] = set()  # specs whose shared engine was dropped broken
        #: specs whose engine core refused the guard asked for: said again, never restarted
        self._refused: dict[EngineSpec, str] = {}
        self._reaper: Reaper | None = None
        #: a Ctrl-C came while ``close`` stopped the engines (the run ends as interrupted)
        self.interrupted = False
        #: engines started by this pool, ever
        self.started = 0

    def acquire(self, spec: EngineSpec, instructions: DeadlineAndFaults, test: str = "") -> EngineBase:
        """The shared engine for ``spec``, told ``instructions``; started or restarted if need be.

        A configuration whose engine core refused its guard fails every later test of
        it at once, with the same line: the same environment would be refused again.
        """
        if spec in self._refused:
            raise GuardRefused(self._refused[spec])
        engine = self._live.get(spec)
        if engine is not None and not engine.alive:
            self.drop(engine)
            engine = None
        if engine is None:
            try:
                engine = self.start_dedicated(spec, instructions, restart=spec in self._died)
            except GuardRefused as exc:
                self._refused[spec] = str(exc)
                raise
            self._died.discard(spec)
            self._live[spec] = engine
        else:
            engine.instruct(instructions)
        if test:
            next(r for r in self._records if r.engine is engine).tests.append(test)
        return engine

    def start_dedicated(
        self, spec: EngineSpec, instructions: DeadlineAndFaults, restart: bool = False
    ) -> EngineBase:
        """Start and count an engine, first making room; not shared unless ``acquire`` made it."""
        reaper = self._make_room()
        engine: EngineBase = Server(spec, reaper) if spec.server else Engine(spec, reaper)
        engine.restart = restart
        self._records.append(EngineRecord(spec, engine, restart=restart))
        self.started += 1
        engine.start(instructions, self.progress)
        return engine

    def _make_room(self) -> Reaper:
        while len(self._live) >= self.max_alive:
            self.drop(next(iter(self._live.values())))
        if self._reaper is None:
            self._reaper = Reaper()
        return self._reaper

    def release(self, engine: EngineBase) -> None:
        """After a test: an engine a call failed on is stopped now, not reused."""
        if not engine.alive:
            self.drop(engine)

    def drop(self, engine: EngineBase) -> None:
        """Stop ``engine`` and forget it as a shared one."""
        for spec, live in list(self._live.items()):
            if live is engine:
                del self._live[spec]
                if not engine.alive:
                    self._died.add(spec)
        self._stop(engine)

    def _stop(self, engine: EngineBase) -> None:
        try:
            engine.stop()
        except ProcessesSurvived as exc:  # the summary names them; the other engines still stop
            record = next(r for r in self._records if r.engine is engine)
            record.survivors = exc.survivors

    def hurry(self) -> None:
        """The run was interrupted: engines stop without vLLM's graceful shutdown."""
        for rec in self._records:
            rec.engine.hurry = True

    def close(self) -> list[EngineRecord]:
        """Stop every engine still running; return what this pool started since the last close.

        A Ctrl-C meanwhile does not cut the stops short of stopping (``cleanup.held``): the
        rest are stopped quickly and ``interrupted`` says one came.
        """
        self._live.clear()
        with cleanup.held:
            for rec in self._records:  # shared ones, and dedicated ones a test did not stop
                if not rec.engine.stopped:
                    rec.engine.hurry = rec.engine.hurry or cleanup.held.interrupted
                    self._stop(rec.engine)
            if self._reaper is not None:
                self._reaper.close()
                self._reaper = None
        self.interrupted = cleanup.held.take() or self.interrupted
        records, self._records = self._records, []
        return records
