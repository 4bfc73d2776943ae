"""The part of pytest-enginedead that runs inside ``VLLM::EngineCore``.

Two jobs, at one place in vLLM (the executor's RPC for ``execute_model`` and
``sample_tokens``, see ``in_core.EXECUTOR_RPC``):

* **the deadline in force**: under the harness, the deadline each RPC is sent with
  comes from the control file in the engine's run directory (``Control``), so
  one engine serves tests with different deadlines;
* **the guard** (``ENGINEDEAD_GUARD=1``): vLLM's deadline stops being the line of
  death and becomes the point of suspicion.  The RPC is sent with the guard's hard
  cap, ``policy.timeout_s(CPU, batch, tokens)`` (never below vLLM's deadline), and the
  reply wait (``in_core.READ_TIMEOUT``) asks whether the worker is alive and busy:
  ``SLOW`` (computing) keeps waiting up to the cap; ``HUNG`` (alive, no CPU and no step
  progress) for ``hang_s`` ends the wait with vLLM's own ``TimeoutError``, so the engine
  dies the way it always does; ``DEAD`` is left to vLLM's worker monitor.

On several nodes (``ENGINEDEAD_PROGRESS_DIR``) the ranks of the other nodes are judged from
the progress they publish (``process.remote``): one that computes keeps the wait going like
a local one; one whose progress stopped arriving is gone (``DEAD``), which vLLM's worker
monitor cannot see on another machine, so the guard ends the wait itself once no rank has
shown progress for ``hang_s``.

The wait is only ever shortened from inside vLLM's loop, never extended past what
vLLM was told: a late reply cannot answer the next RPC, and large replies that go
through a socket keep their full timeout.  Unset, nothing in vLLM is patched.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import psutil

from ..compat import in_core, in_worker, versions
from ..contract.control import ControlReader
from ..contract.decisions import GuardAction
from ..contract.guardfiles import (
    CoreReady,
    GuardEvent,
    GuardState,
    guard_events_path,
    guard_state_path,
    state_dir,
    write_core_ready,
    write_guard_state,
)
from ..contract.names import ENV_DIR, ENV_FRONT_PID, GUARD_POLICY_ENV, PROGRESS_DIR_ENV
from ..contract.steps import steps_path
from ..logic.inputs.guardconfig import GuardConfig, config_from_env, guard_asked, misplaced_policy
from ..logic.timeouts.policies import Backend
from ..process.remote import RemoteLook
from .guardnodes import OtherNodes
from .stale import remove_stale_states
from .watch import Watch

logger = logging.getLogger("vllm.enginedead")


class Core:
    """The engine core's side: the deadline in force, the guard, their evidence."""

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
        self._batch: int = 0
        self._tokens: int | None = None
        self._procs: list[psutil.Process] | None = None
        self._workers: list[tuple[int, int]] = []
        self._executor: Any = None
        self._warned_policy = False

    def begin(self, executor: Any, method: str, timeout: float, args: Any) -> tuple[float, Watch | None]:
        """(the timeout to send this step RPC with, its watch when the guard is on)."""
        self._executor = executor
        control = self.control.get() if self.control else None
        deadline = float(control.deadline_s) if control and control.deadline_s else float(timeout)
        if method == "execute_model":
            self.steps += 1
            output = args[0] if args else None
            self._batch = in_worker.step_batch_size(output)
            self._tokens = in_worker.step_tokens(output)
        if self.guard is None or self._batch == 0:
            return deadline, None
        cap = max(deadline, self._cap())
        return cap, Watch(self, method, self.steps, self._batch, deadline, cap)

    def _cap(self) -> float:
        assert self.guard is not None
        try:
            cap = float(self.guard.policy.timeout_s(Backend.CPU, self._batch, self._tokens))
            if not math.isfinite(cap):
                raise ValueError(f"returned {cap!r}")
            return min(cap, float(versions.MAX_DEADLINE_S))  # past it, Python's waits overflow
        except Exception as exc:  # the user's policy: say so once, fall back to vLLM's deadline
            if not self._warned_policy:
                self._warned_policy = True
                logger.warning(
                    "enginedead guard: policy %s: timeout_s(CPU, %d, %s) failed (%s: %s); "
                    "using vLLM's deadline as the cap",
                    self.guard.policy_name, self._batch, self._tokens, type(exc).__name__, exc,
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

    def state_base(self, now: float) -> GuardState:
        """The guard's state with no step running long: this engine core's own fields."""
        assert self.guard is not None
        return GuardState(pid=os.getpid(), front=self.front, hang_s=self.guard.hang_s,
                          policy=self.guard.policy_name, updated=now)

    def write_state(self, state: GuardState | None) -> None:
        """Rewrite the guard's state: a step's while it runs long, None when none runs.

        Once the guard has ended a wait (``ended``), that stays: the engine is dying of it.
        """
        if self.state_path is None or self.guard is None:
            return
        if state is None:
            state = self.state_base(time.monotonic())
        if self._ended and not state.ended:
            return
        self._ended = state.ended or self._ended
        with contextlib.suppress(OSError):
            write_guard_state(self.state_path, state)

    def note(self, event: GuardEvent) -> None:
        if self.run_dir:
            with contextlib.suppress(OSError), open(guard_events_path(self.run_dir), "a") as f:
                f.write(event.to_line())


_tls = threading.local()  # the Watch of the reply being waited for on this thread


def _with_watch(watch: Watch, call: Callable[[], Any], finish: bool = False) -> Any:
    prev = getattr(_tls, "watch", None)
    _tls.watch = watch
    try:
        return call()
    finally:
        _tls.watch = prev
        if finish:
            watch.finish()


def _wrap_rpc(original: Callable[..., Any], core: Core) -> Callable[..., Any]:
    def collective_rpc(self: Any, method: Any, timeout: float | None = None, *rest: Any, **kw: Any) -> Any:
        if not (isinstance(method, str) and method in in_core.STEP_RPCS and timeout is not None):
            return original(self, method, timeout, *rest, **kw)
        timeout, watch = core.begin(self, method, timeout, kw.get("args", rest[0] if rest else ()))
        if watch is None:
            return original(self, method, timeout, *rest, **kw)
        later = False
        try:
            result = _with_watch(watch, lambda: original(self, method, timeout, *rest, **kw))
            inner = getattr(result, "get_response", None) if isinstance(result, Future) else None
            if callable(inner):  # non_block: the reply is read later, by result()
                later = True
                result.get_response = lambda: _with_watch(watch, inner, finish=True)
            return result
        finally:
            if not later:
                watch.finish()

    collective_rpc.__enginedead__ = True  # type: ignore[attr-defined]
    return collective_rpc


def _guarded_read_timeout(base: type[Any]) -> type[Any]:
    class GuardedReadTimeout(base):  # type: ignore[misc]
        """vLLM's reply wait, which also asks the guard on every pass (rate-limited)."""

        __enginedead__ = True

        def __init__(self, timeout: float | None, should_warn: bool) -> None:
            super().__init__(timeout=timeout, should_warn=should_warn)
            self._watch: Watch | None = getattr(_tls, "watch", None)

        def timeout_ms(self) -> int:
            watch = self._watch
            if watch is None:
                return int(super().timeout_ms())
            watch.observe()  # raises TimeoutError when the worker has hung long enough
            try:
                wait_ms = int(super().timeout_ms())
            except TimeoutError:
                watch.past_cap()
                raise
            return min(wait_ms, watch.ms_to_next_look())

    return GuardedReadTimeout


def _install(core: Core) -> None:
    module, cls_name, attr = in_core.EXECUTOR_RPC
    executor_cls = getattr(importlib.import_module(module), cls_name)
    rpc = getattr(executor_cls, attr)
    if not getattr(rpc, "__enginedead__", False):
        setattr(executor_cls, attr, _wrap_rpc(rpc, core))
    if core.guard is not None:
        module, cls_name, attr = in_core.READ_TIMEOUT
        queue_cls = getattr(importlib.import_module(module), cls_name)
        base = getattr(queue_cls, attr)
        if not getattr(base, "__enginedead__", False):
            setattr(queue_cls, attr, _guarded_read_timeout(base))


def in_engine_core() -> bool:
    return multiprocessing.current_process().name.startswith(in_core.ENGINE_CORE_PROCESS_PREFIX)


def patched() -> dict[str, bool]:
    """Which of the vLLM attributes the guard may replace are replaced in this process."""
    found = {}
    for module, cls_name, attr in (in_core.EXECUTOR_RPC, in_core.READ_TIMEOUT):
        cls = getattr(importlib.import_module(module), cls_name)
        found[f"{cls_name}.{attr}"] = bool(getattr(getattr(cls, attr), "__enginedead__", False))
    return found


def register(environ: Mapping[str, str] | None = None) -> Core | None:
    """In the engine core process: install the deadline control and the guard, if asked.

    Under the harness (a run directory), the guard's start-up record says what came
    of it (``CoreReady``): on with which policy and ``hang_s``, or why not.
    """
    environ = os.environ if environ is None else environ
    if not in_engine_core():
        return None
    run_dir = environ.get(ENV_DIR) or None
    guard, problem = config_from_env(environ, versions.installed_version())
    if problem:
        logger.error("enginedead guard: %s; the guard stays off", problem)
    misplaced = misplaced_policy(environ)
    if misplaced:
        logger.warning("enginedead guard: %s", misplaced)
    if run_dir is None and guard is None:
        return None  # nothing asked for: nothing in vLLM is touched
    state_path = None
    if guard is not None:
        directory = state_dir(environ)
        state_path = guard_state_path(directory, os.getpid())
        remove_stale_states(directory)
    front = environ.get(ENV_FRONT_PID, "")
    core = Core(run_dir, guard, state_path, int(front) if front.isdigit() else os.getppid(),
                environ.get(PROGRESS_DIR_ENV) or None)
    core.marks_dir = state_dir(environ)
    _install(core)
    if guard is not None:
        core.write_state(None)
        logger.warning(
            "enginedead guard on: policy %s caps each step, hang_s %g s; its state for "
            "`enginedead probe`: %s", guard.policy_name, guard.hang_s, state_path,
        )
    if run_dir:
        ready = CoreReady(
            pid=os.getpid(), guard=guard is not None, asked=guard_asked(environ),
            policy=guard.spec if guard else (environ.get(GUARD_POLICY_ENV, "").strip() or None),
            policy_name=guard.policy_name if guard else None,
            hang_s=guard.hang_s if guard else None, problem=problem,
        )
        with contextlib.suppress(OSError):
            write_core_ready(run_dir, ready)
    return core
