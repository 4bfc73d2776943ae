"""What the code inside vLLM left in an engine's run directory: steps, guard decisions, stacks.

``RunEvidence`` reads it for one engine, by pid; once the engine stopped it keeps the
records it read last, since the run directory goes with the engine.  On several nodes it
also reads the other nodes' ranks from the progress they publish (``process.remote``):
those ranks have no pid here.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence

import psutil

from ..compat import versions
from ..contract.collectives import in_collective_since, waiting_for_a_peer
from ..contract.dumps import STACK_SIGNAL, DeadlineStack, deadline_stack_path, read_deadline_stack, stack_path
from ..contract.guardfiles import GuardEvent, guard_events_path, read_guard_events
from ..contract.stepprogress import StepProgress, read_step_progress
from ..contract.steps import StepTime, read_steps, steps_path
from ..process.remote import RemoteLook, RemoteRanks
from .cleanup import ProcRef


class RunEvidence:
    """One engine's records and stacks, read from its run directory for its processes."""

    def __init__(self, run_dir: str, procs: Callable[[], Sequence[ProcRef]]) -> None:
        self.run_dir = run_dir
        self._procs = procs
        self._final_steps: list[StepTime] | None = None
        self._final_events: list[GuardEvent] | None = None
        self._remote: RemoteRanks | None = None
        self._final_remote: list[RemoteLook] | None = None

    def freeze(self) -> None:
        """Keep what the records say now: the run directory is about to go."""
        self._final_steps, self._final_events = self.steps(), self.guard_events()
        if self._remote is not None:
            self._final_remote = self._remote.look()

    def watch_remote(self, progress_dir: str, local_node: int = 0) -> None:
        """The engine's ranks on other nodes publish their progress in ``progress_dir``."""
        self._remote = RemoteRanks(progress_dir, local_node)

    @property
    def has_remote(self) -> bool:
        return self._remote is not None

    def remote_ranks(self, fresh: bool = False) -> list[RemoteLook]:
        """The other nodes' ranks as their progress shows them (``fresh``: once each has spoken since
        this call, or gone silent: what a verdict after a death needs); none on one node."""
        if self._final_remote is not None or self._remote is None:
            return list(self._final_remote or [])
        return self._remote.fresh() if fresh else self._remote.look()

    def remote_stack(self, node: int, rank: int, timeout_s: float = 1.0) -> str | None:
        """A remote rank's Python stack, asked for through the progress directory."""
        if self._remote is None or self._final_remote is not None:
            return None
        return self._remote.stack(node, rank, timeout_s)

    def waiting_for_a_peer(self, pid: int) -> bool:
        """Worker ``pid`` sits in a collective, waiting for a peer rank (its mark says so)."""
        return waiting_for_a_peer(self.run_dir, pid)

    def in_collective_s(self, pid: int, now: float) -> float | None:
        """How long worker ``pid`` has sat in the collective it is in at ``now`` (None: in none)."""
        since = in_collective_since(self.run_dir, pid)
        return None if since is None else now - since

    def step_progress(self, pid: int) -> StepProgress | None:
        """Worker ``pid``'s step progress as its record stands (None: it keeps none)."""
        return read_step_progress(self.run_dir, pid)

    def steps(self) -> list[StepTime]:
        """Every step the engine's workers recorded, oldest first."""
        if self._final_steps is not None:
            return list(self._final_steps)
        out: list[StepTime] = []
        for ref in self._procs():
            out.extend(read_steps(steps_path(self.run_dir, ref.pid), ref.pid))
        return sorted(out, key=lambda s: s.started)

    def guard_events(self) -> list[GuardEvent]:
        """The guard's decisions in this engine's core, oldest first."""
        if self._final_events is not None:
            return list(self._final_events)
        return read_guard_events(guard_events_path(self.run_dir))

    def running_step(self, pid: int) -> StepTime | None:
        """The step ``pid`` is in now, per its record, or None."""
        steps = read_steps(steps_path(self.run_dir, pid), pid)
        return steps[-1] if steps and steps[-1].running else None

    def has_record(self, pid: int) -> bool:
        return os.path.exists(steps_path(self.run_dir, pid))

    @property
    def worker_pids(self) -> list[int]:
        """Processes that run model steps (those with a step record, else by title)."""
        procs = list(self._procs())
        recorded = [r.pid for r in procs if self.has_record(r.pid)]
        if recorded:
            return recorded
        titled = []
        for ref in procs:
            proc = ref.process()
            with contextlib.suppress(psutil.Error):
                if proc is not None and versions.WORKER_TITLE in " ".join(proc.cmdline()):
                    titled.append(ref.pid)
        return titled

    def capture_stack(self, pid: int, timeout_s: float = 0.4) -> str | None:
        """Ask the worker to dump its Python stack (faulthandler on SIGUSR2); read it."""
        ref = next((r for r in self._procs() if r.pid == pid), None)
        path = stack_path(self.run_dir, pid)
        if ref is None or ref.process() is None or not os.path.exists(path):
            return None
        size = os.path.getsize(path)
        os.kill(pid, STACK_SIGNAL)
        deadline = time.monotonic() + timeout_s
        last = -1
        while time.monotonic() < deadline:
            time.sleep(0.02)
            now = os.path.getsize(path)
            if now > size and now == last:
                break
            last = now
        with open(path) as f:
            header = f.readline()
            f.seek(size)
            text = f.read()
        return header + text if text else None

    def deadline_stack(
        self, pid: int, step: StepTime, deadline_s: float, wait_s: float | None = 0.5
    ) -> DeadlineStack | None:
        """The worker's own stack at the deadline of ``step`` (``worker.DeadlineWatch``).

        vLLM's deadline runs from when it sent the step, a moment before the worker
        began it, so the dump may still be due: wait for it until ``wait_s`` past due
        (None: read what is there now).
        """
        path = deadline_stack_path(self.run_dir, pid)
        if wait_s is None:
            dump = read_deadline_stack(path)
            return dump if dump is not None and dump.step == step.step else None
        until = max(time.monotonic(), step.started + deadline_s) + wait_s
        while True:
            dump = read_deadline_stack(path)
            if dump is not None and dump.step == step.step:
                return dump
            if time.monotonic() >= until:
                return None
            time.sleep(0.02)
