"""What every kind of engine shares: its run directory, its processes, one start sequence, stop.

An engine is a vLLM process tree the harness started (``offline.Engine``: ``vllm.LLM`` in
this process; ``server.Server``: the OpenAI API server) and its run directory, which holds
what the code inside vLLM writes (the step record, stack dumps, guard events) and reads
(the control file with the deadline and faults).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psutil

from ..compat import versions
from ..contract.control import Control
from ..contract.guardfiles import CoreReady, read_core_ready
from ..contract.names import GUARD_ENV
from ..logic.planning.engines import EngineSpec, GuardSpec, Instructions
from . import cleanup, ledger
from .cleanup import ProcessesSurvived, ProcRef, Reaper, mapped_shm, started_children, terminate, unlink_shm
from .environment import engine_environment
from .evidence import RunEvidence
from .liveness import ProcessEvidence, snapshot
from .nodes import OnNodes
from .threads import Progress, Ticker


class EngineStartError(RuntimeError):
    """vLLM could not start an engine for this spec; the message says why."""


class GuardRefused(EngineStartError):
    """The engine core's guard is not what the engine was asked to run with (its own record says)."""


def guard_problem(asked: GuardSpec | None, ready: CoreReady) -> str | None:
    """Why the guard in the engine core is not the one asked for, in one line, or None.

    ``ready`` is the engine core's own start-up record: asked for the guard, it must
    be on with the policy and ``hang_s`` asked for; not asked, it must be off.
    """
    core = f"{versions.ENGINE_CORE_TITLE} (pid {ready.pid})"
    if asked is None:
        if ready.guard or ready.asked:
            return (
                f"the guard was not asked for, but {core} saw {GUARD_ENV} set "
                f"({'on' if ready.guard else 'refused'}): the harness's engines must not inherit it"
            )
        return None
    want = (f"{asked.source or 'this engine'} asked for the guard (policy {asked.policy!r}, "
            f"hang_s {asked.hang_s:g} s)")
    if not ready.guard:
        why = ready.problem or f"{GUARD_ENV} did not reach it"
        return f"the guard is off: {want}, and {core} refused it: {why}"
    if ready.policy != asked.policy or ready.hang_s != asked.hang_s:
        return (f"the guard is not as asked: {want}, but {core} runs it with policy {ready.policy!r}, "
                f"hang_s {ready.hang_s:g} s")
    return None


def guard_refusal(run_dir: str, asked: GuardSpec | None) -> str | None:
    """``guard_problem`` by the engine core's record in ``run_dir`` (None while it wrote none)."""
    ready = read_core_ready(run_dir)
    return None if ready is None else guard_problem(asked, ready)


class EngineBase(OnNodes):
    """A vLLM engine's process tree and run directory; kinds say how they launch and stop."""

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
        self.deaths: list[dict[str, Any]] = []
        self.instructions: list[Instructions] = []  # every one it ran under, in order
        self._epoch = 0
        self._reaper = reaper
        self.hurry = False  # the run was interrupted: stop without vLLM's graceful shutdown

    def environment(self, first: Instructions) -> dict[str, str]:
        """The variables the engine's processes start with (``environment.engine_environment``)."""
        return self.head_environment(engine_environment(self.spec, self.run_dir, first))

    def instruct(self, instructions: Instructions) -> None:
        """From the next RPC on, the engine runs under this deadline and these faults."""
        self._epoch += 1
        self.write_control(Control(self._epoch, instructions.deadline_whole_s, instructions.injection))
        self.instructions.append(instructions)

    def check_core_ready(self) -> None:
        """The engine core must have loaded our side of the plugin, or deadlines cannot switch;
        and its guard must be the one asked for (``guard_problem``), by its own record."""
        if read_core_ready(self.run_dir) is None:
            raise EngineStartError(
                "vLLM's engine core did not load the enginedead plugin (its vllm.general_plugins "
                f"entry); is VLLM_PLUGINS={os.environ.get('VLLM_PLUGINS')!r} leaving it out?"
            )
        problem = self.guard_refusal()
        if problem:
            raise GuardRefused(problem)

    def guard_refusal(self) -> str | None:
        """The guard's refusal once the engine core has written its record (None so far)."""
        return guard_refusal(self.run_dir, self.spec.guard)

    def adopt(self, me: psutil.Process, before: set[int]) -> None:
        """Record the processes this start created (our own tree, by pid)."""
        self.procs += started_children(me, before | self.node_tree(), self.procs)  # the head's alone
        self.shm |= mapped_shm(self.procs)
        if self._reaper is not None:
            self._reaper.track(self.run_dir, self.procs, self.shm, self.run_dir)

    @property
    def alive(self) -> bool:
        return not self.stopped and not self.broken and self.nodes_alive

    def start(self, first: Instructions, progress: Progress | None = None) -> EngineBase:
        """Start vLLM under ``first``: the one start sequence (kinds fill in ``launch``,
        ``adopt_started``, ``start_error``, ``ready_message``); a failed start stops what it made."""
        self.instruct(first)
        t0 = time.monotonic()
        try:
            with Ticker(progress, f"starting {self.kind} ({self.spec.label()})", t0):
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

    def launch(self, first: Instructions) -> None:
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
            self.shm |= mapped_shm(self.procs)

            def fast() -> bool:
                return self.hurry or cleanup.held.interrupted

            if self.graceful_stop and not fast():
                self.shutdown(give_up=fast)
            leftover = terminate(self.procs, grace_s=self.stop_grace_s, at_once=fast(), shm=self.shm)
            leftover += self.stop_nodes()  # a headless node outlives its head (vLLM #32136)
            self.shutdown()
            unlink_shm(self.shm)
            self.evidence.freeze()  # the records outlive their run directory
            shutil.rmtree(self.run_dir, ignore_errors=True)
            if self._reaper is not None and not leftover:
                self._reaper.forget(self.run_dir)
            ledger.stopped(self, cut=fast())
            if leftover:
                raise ProcessesSurvived(leftover)
        if not cleanup.held.holding and cleanup.held.take():
            raise KeyboardInterrupt  # what the user pressed, now that nothing is half-stopped

    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self.procs]

    def liveness(self, window_s: float = 0.2) -> dict[int, ProcessEvidence]:
        return snapshot(self.pids, window_s)
