"""The plugin in ``VLLM::EngineCore``: the deadline each step RPC is sent with, and what the
guard keeps there (its settings, the workers it judges, its state for ``enginedead probe``,
its decisions for the harness).

``guard.register`` makes one in the engine core when the harness's run directory or
``ENGINEDEAD_GUARD`` asks for it; ``watch.StepWatch`` watches one step RPC against it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from typing import Any

import psutil

from ..compat import in_core, in_worker
from ..contract.collectives import mark_pid
from ..contract.control import ControlReader
from ..contract.decisions import GuardAction
from ..contract.guardfiles import (
    GuardEvent,
    GuardState,
    guard_events_path,
    guard_state_pid,
    read_guard_state,
    write_guard_state,
)
from ..contract.metricsfile import DeadlineSource
from ..contract.stepprogress import layers_pid
from ..contract.steps import steps_path
from ..logic import releases
from ..logic.inputs.guardconfig import GuardConfig
from ..logic.timeouts.policies import Backend
from ..process import reading
from ..process.remote import RemoteLook
from .guardnodes import OtherNodes
from .stepmetrics import StepMetrics, StepRpc
from .watch import StepWatch

logger = logging.getLogger("vllm.enginedead")


class EngineCorePlugin:
    """The plugin in ``VLLM::EngineCore``: the deadline in force, the guard's settings, the workers,
    the guard's state and decisions."""

    def __init__(self, run_dir: str | None, guard: GuardConfig | None,
                 state_path: str | None = None, front: int = 0, progress_dir: str | None = None) -> None:
        self.run_dir = run_dir
        self.nodes = OtherNodes(progress_dir)  # on several nodes: the other nodes' ranks
        self.guard = guard
        #: where the guard's state goes for a liveness probe (``GuardState``)
        self.state_path = state_path
        self.front = front
        #: where the workers mark their collectives (``contract.collectives``)
        self.marks_dir: str | None = run_dir
        self._ended: GuardAction | None = None
        self.control = ControlReader(run_dir) if run_dir else None
        self.steps = 0
        #: the batch of the step in flight
        self.batch: int = 0
        self._tokens: int | None = None
        self._procs: list[psutil.Process] | None = None
        self._workers: list[tuple[int, int]] = []
        self._executor: Any = None
        self._warned_policy = False
        #: the engine's figures for Prometheus (None: off)
        self.metrics: StepMetrics | None = None
        #: where the deadline of the step RPC being sent came from
        self.source = DeadlineSource.STOCK

    @property
    def executor(self) -> Any:
        """vLLM's executor, once a step RPC went through it (None before)."""
        return self._executor

    def begin(self, executor: Any, method: str, timeout: float, args: Any) -> tuple[float, float | None]:
        """(the timeout to send this step RPC with, vLLM's deadline for it when the guard watches it).

        With the guard on, the RPC is sent with the guard's cap and watched against the deadline.
        """
        self._executor = executor
        control = self.control.get() if self.control else None
        deadline = float(control.deadline_s) if control and control.deadline_s else float(timeout)
        self.source = DeadlineSource.HARNESS if control and control.deadline_s else DeadlineSource.STOCK
        if method == "execute_model":
            self.steps += 1
            output = args[0] if args else None
            self.batch = in_worker.step_batch_size(output)
            self._tokens = in_worker.step_tokens(output)
        if self.guard is None or self.batch == 0:
            return deadline, None
        cap = self._cap()
        if cap > deadline:
            self.source = DeadlineSource.POLICY
        return max(deadline, cap), deadline

    def step_rpc(self, method: str, timeout: float, deadline: float | None) -> StepRpc | None:
        """The step RPC about to be sent with ``timeout``, watched by the guard (``deadline``: vLLM's, when
        the guard watches it) and counted for Prometheus; None when neither is on, or the step is empty."""
        if self.batch == 0 or (deadline is None and self.metrics is None):
            return None
        if deadline is None:
            return StepRpc(self, method, timeout, timeout, self.source, None)
        watch = StepWatch(self, method, self.steps, self.batch, deadline, timeout)
        return StepRpc(self, method, deadline, timeout, self.source, watch)

    def _cap(self) -> float:
        assert self.guard is not None
        try:
            cap = float(self.guard.policy.timeout_s(Backend.CPU, self.batch, self._tokens))
            if not math.isfinite(cap):
                raise ValueError(f"returned {cap!r}")
            return min(cap, float(releases.MAX_DEADLINE_S))  # past it, Python's waits overflow
        except Exception as exc:  # the user's policy: say so once, fall back to vLLM's deadline
            if not self._warned_policy:
                self._warned_policy = True
                logger.warning(
                    "enginedead guard: policy %s: timeout_s(CPU, %d, %s) failed (%s: %s); "
                    "using vLLM's deadline as the cap",
                    self.guard.policy_name, self.batch, self._tokens, type(exc).__name__, exc,
                )
            return 0.0

    def workers(self) -> list[tuple[int, int]]:
        """(rank, pid) of each worker, in the order of ``worker_procs``."""
        self.worker_procs()
        return self._workers

    def remote_looks(self, cached: bool = False) -> list[RemoteLook]:
        """The other nodes' ranks as their progress shows them now (none on one node); ``cached``:
        as the last look saw them."""
        return self.nodes.look(self._executor, cached)

    def rank_count(self) -> int:
        """Every rank the guard judges: its own node's and the others' it has heard of."""
        return (len(self.workers()) + len(self.nodes.looks)) or 1

    def worker_procs(self) -> list[psutil.Process]:
        if self._procs is None and self._executor is not None:
            procs, workers = [], []
            for rank, pid in in_core.executor_workers(self._executor):
                with contextlib.suppress(psutil.Error):
                    procs.append(psutil.Process(pid))
                    workers.append((rank, pid))
            self._procs, self._workers = procs, workers
        return self._procs or []

    def record_sizes(self, procs: list[psutil.Process]) -> tuple[int, ...]:
        """Sizes of the workers' step records: a new step or phase is progress."""
        if not self.run_dir:
            return ()
        sizes = []
        for proc in procs:
            try:
                sizes.append(os.stat(steps_path(self.run_dir, proc.pid)).st_size)
            except OSError:
                sizes.append(-1)
        return tuple(sizes)

    def state(self, now: float) -> GuardState:
        """The guard's state with no step running (a watch fills in its step's)."""
        assert self.guard is not None
        return GuardState(pid=os.getpid(), front=self.front, hang_s=self.guard.hang_s,
                          policy=self.guard.policy_name, updated=now)

    def write_state(self, state: GuardState | None) -> None:
        """Rewrite the guard's state: a step's while it runs long, None when none runs.

        Once the guard has ended a wait (``ended``), that stays: the engine is dying of it.
        """
        if self.state_path is None or self.guard is None:
            return
        state = state or self.state(time.monotonic())
        if self._ended and not state.ended:
            return
        self._ended = state.ended or self._ended
        with contextlib.suppress(OSError):
            write_guard_state(self.state_path, state)

    def note(self, event: GuardEvent) -> None:
        if self.metrics is not None:
            self.metrics.decision(event.action, event.verdict)
        if self.run_dir:
            with contextlib.suppress(OSError), open(guard_events_path(self.run_dir), "a") as f:
                f.write(event.to_line())


def remove_stale_states(directory: str, front: int | None = None) -> None:
    """Remove guard states whose engine core is gone (or, given ``front``, that front's), and the
    collective marks and step progress records whose worker is gone (a killed worker leaves its own)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            worker = mark_pid(name) or layers_pid(name)
            if worker is not None and front is None and not reading.exists(worker):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(directory, name))
            pid = guard_state_pid(name)
            if pid is None:
                continue
            path = os.path.join(directory, name)
            if front is not None:
                state = read_guard_state(path)
                if state is None or state.front != front:
                    continue
            elif reading.exists(pid):
                continue
            with contextlib.suppress(OSError):
                os.remove(path)
