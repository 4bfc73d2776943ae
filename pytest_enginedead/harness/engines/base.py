"""What every kind of engine shares: its run directory, its processes, one start sequence, stop.

An engine is a vLLM process tree the harness started (``offline.Engine``: ``vllm.LLM`` in
this process; ``server.Server``: the OpenAI API server) and its run directory, which holds
what the code inside vLLM writes (the step record, stack dumps, guard events) and reads
(the control file with the deadline and faults).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from typing import TypeVar

import psutil

from ...contract.control import Control
from ...logic.planning.engines import DeadlineAndFaults, EngineSpec
from ...process.pinned import ProcRef
from ..judging.evidence import RunEvidence
from ..judging.liveness import ProcessEvidence, snapshot
from ..judging.verdict import Finding
from ..waiting import Progress, Ticker
from . import cleanup, ledger, stopping
from .cleanup import ProcessesSurvived, mapped_shm, started_children
from .coreready import EngineStartError, GuardRefused, check_core_ready
from .environment import engine_environment
from .nodes import OnNodes
from .reaper import Reaper

_Engine = TypeVar("_Engine", bound="EngineBase")


class EngineBase(OnNodes):
    """A vLLM engine's process tree and run directory; kinds say how they launch and stop.

    A context manager: ``with Engine(spec).start(first) as engine:`` stops it on the way out
    (a start that fails has stopped what it made before it raises).
    """

    kind = "engine"
    graceful_stop = True  # ask vLLM to stop (``shutdown``) before ending the processes by pid
    stop_grace_s = 3.0  # between SIGTERM and SIGKILL when the processes are ended by pid
    start_failure = "vLLM could not start an engine on {model}: {exc}"  # a start that raised

    def __init__(self, spec: EngineSpec, reaper: Reaper | None = None) -> None:
        self.spec = spec
        self.procs: list[ProcRef] = []
        self.shm: set[str] = set()
        self.run_dir = tempfile.mkdtemp(prefix="enginedead-")
        self.evidence = RunEvidence(self.run_dir, lambda: self.procs)
        self.start_s: float | None = None
        self.restart = False  # started after this spec's engine died (the pool says so)
        self.broken = False  # a call did not return normally: do not reuse
        self.stopped = False
        #: the verdicts on its deaths (``assert_no_false_death`` notes them)
        self.findings: list[Finding] = []
        self.instructions: list[DeadlineAndFaults] = []  # every one it ran under, in order
        self._epoch = 0
        self._reaper = reaper
        self.hurry = False  # the run was interrupted: stop without vLLM's graceful shutdown

    def environment(self, first: DeadlineAndFaults) -> dict[str, str]:
        """The variables the engine's processes start with (``environment.engine_environment``)."""
        return self.head_environment(engine_environment(self.spec, self.run_dir, first))

    def instruct(self, instructions: DeadlineAndFaults) -> None:
        """From the next RPC on, the engine runs under this deadline and these faults."""
        self._epoch += 1
        self.write_control(Control(self._epoch, instructions.deadline_whole_s, instructions.injection))
        self.instructions.append(instructions)

    def adopt(self, me: psutil.Process, before: set[int]) -> None:
        """Record the processes this start created (our own tree, by pid)."""
        self.procs += started_children(me, before | self.node_tree(), self.procs)  # the head's alone
        self.shm |= mapped_shm(self.procs)
        if self._reaper is not None:
            self._reaper.track(self.run_dir, self.procs, self.shm, self.run_dir)

    @property
    def alive(self) -> bool:
        return not self.stopped and not self.broken and self.nodes_alive

    def start(self: _Engine, first: DeadlineAndFaults, progress: Progress | None = None) -> _Engine:
        """Start vLLM under ``first``: the one start sequence (kinds fill in ``launch``,
        ``adopt_started``, ``start_error``, ``ready_message``); a failed start stops what it made."""
        self.instruct(first)
        t0 = time.monotonic()
        try:
            with self._starting(), Ticker(progress, f"starting {self.kind} ({self.spec.label()})", t0):
                self.launch_nodes(first)
                self.launch(first)
                self.adopt_started()
            self.check_core_ready()
        except BaseException as exc:
            if progress:
                progress(f"{self.kind} failed to start after {time.monotonic() - t0:.1f} s", done=True)
            self.hurry = not isinstance(exc, Exception)  # Ctrl-C, pytest-timeout: stop at once
            self.adopt_started()
            self.broken = True
            self.stop()
            error = self.start_error(exc)
            if error is None:
                raise
            raise error from (None if isinstance(error, GuardRefused) else exc)
        self.start_s = time.monotonic() - t0
        ledger.started(self)
        if progress:
            progress(f"{self.kind} ready in {self.start_s:.1f} s {self.ready_message()}", done=True)
        return self

    def _starting(self) -> contextlib.AbstractContextManager[None]:
        """Until its processes are adopted, the reaper keeps what the start makes."""
        return self._reaper.starting(self.run_dir) if self._reaper is not None else contextlib.nullcontext()

    def check_core_ready(self) -> None:
        """The engine core's own start-up record, checked (``coreready.check_core_ready``)."""
        check_core_ready(self.run_dir, self.spec.guard)

    def launch(self, first: DeadlineAndFaults) -> None:
        """Start vLLM's processes and wait until they serve (each kind)."""
        raise NotImplementedError

    def adopt_started(self) -> None:
        """Record every process the start made so far (each kind finds them its way)."""

    def start_error(self, exc: BaseException) -> EngineStartError | None:
        """The error a failed start raises (``start_failure``'s words), or None to let ``exc`` be."""
        if isinstance(exc, EngineStartError) or not isinstance(exc, Exception):
            return None
        words = self.start_failure.format(model=self.spec.model, kind=type(exc).__name__, exc=exc)
        return EngineStartError(words)

    def ready_message(self) -> str:
        """What follows "<kind> ready in N s" in the progress line."""
        return f"({self.spec.label()}; pids {', '.join(map(str, self.pids))}{self.nodes_message()})"

    def shutdown(self, give_up: Callable[[], bool] | None = None) -> None:
        """Ask vLLM to stop (each kind); ``stop`` ends what it leaves, by pid.

        The wait ends once ``give_up()`` is true; without it the processes are gone
        already and only the client's side is closed, briefly.
        """

    def stop(self) -> None:
        """Shut the engine down, then end what remains of its process tree by pid.

        Ctrl-C is held meanwhile (``cleanup.held``) and raised after; once one came, or the
        run was interrupted (``hurry``), or the kind gains nothing by it (``graceful_stop``),
        vLLM's graceful shutdown is skipped: the processes are ended by pid at once.
        """
        with cleanup.held:
            self.stopped = True
            leftover = stopping.stop_tree(self, fast=lambda: self.hurry or cleanup.held.interrupted)
            if self._reaper is not None and not leftover:
                self._reaper.forget(self.run_dir)
            if leftover:
                raise ProcessesSurvived(leftover)
        if not cleanup.held.holding and cleanup.held.take():
            raise KeyboardInterrupt  # what the user pressed, now that nothing is half-stopped

    def __enter__(self: _Engine) -> _Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.stopped:
            self.stop()

    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self.procs]

    def liveness(self, window_s: float = 0.2) -> dict[int, ProcessEvidence]:
        return snapshot(self.pids, window_s)
