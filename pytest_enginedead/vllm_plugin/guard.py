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
from ..contract.collectives import mark_pid, waiting_for_a_peer
from ..contract.control import ControlReader
from ..contract.decisions import GuardAction, Verdict
from ..contract.guardfiles import (
    CoreReady,
    GuardEvent,
    GuardState,
    guard_events_path,
    guard_state_path,
    guard_state_pid,
    read_guard_state,
    state_dir,
    write_core_ready,
    write_guard_state,
)
from ..contract.names import ENV_DIR, ENV_FRONT_PID, GUARD_POLICY_ENV, PROGRESS_DIR_ENV
from ..contract.steps import steps_path
from ..logic.inputs.guardconfig import GuardConfig, config_from_env, guard_asked, misplaced_policy
from ..logic.timeouts.policies import Backend
from ..process import reading
from ..process.remote import RemoteLook
from .guardnodes import OtherNodes

#: The wait loop runs thousands of times a second; the worker is looked at this often.
PROBE_EVERY_S = 0.25

#: A healthy step is over before this: no probe, no cost.
FIRST_PROBE_S = 0.5

logger = logging.getLogger("vllm.enginedead")


class Watch:
    """One step RPC in flight: when it was sent, its deadlines, what the worker did since."""

    def __init__(
        self, core: Core, method: str, step: int, batch: int, deadline_s: float, cap_s: float
    ) -> None:
        self.core = core
        self.method = method
        self.step = step
        self.batch = batch
        self.deadline_s = deadline_s
        self.cap_s = cap_s
        self.sent = time.monotonic()
        self._next_probe = self.sent + FIRST_PROBE_S
        self._last: tuple[float, tuple[float, ...], tuple[int, ...]] | None = None  # t, cpu, sizes
        self._remote_steps: tuple[tuple[int, bool], ...] = ()  # remote ranks' (step, running) last seen
        self._busy_at = self.sent  # the last time a worker showed progress
        self._cores = 0.0  # the busiest rank's CPU use at the last look
        self._busiest: int | RemoteLook = 0  # its index among the local workers, or a remote rank
        self._gone: RemoteLook | None = None  # a remote rank whose progress stopped arriving
        self._said_deadline = False
        self._said_dead = False
        self._wrote_state = False

    def observe(self) -> None:
        """Look at the worker (rate-limited); raise ``TimeoutError`` when it has been HUNG too long."""
        now = time.monotonic()
        if now < self._next_probe:
            return
        self._next_probe = now + PROBE_EVERY_S
        verdict = self._probe(now)
        ran = now - self.sent
        hang_s = self.core.guard.hang_s if self.core.guard else math.inf
        self._state(now, verdict)
        if verdict is Verdict.DEAD and self._gone is None:
            if not self._said_dead:
                self._said_dead = True
                self._decide(now, verdict, GuardAction.MONITOR, "left to vLLM's worker monitor", "is gone")
        elif verdict is not Verdict.SLOW and now - self._busy_at >= hang_s:
            idle = now - self._busy_at
            why = f"idle for {idle:.1f} s (no CPU, no step progress)"
            if self._gone is not None:
                why = (f"{why}; {self._gone.label} sent no progress for {self._gone.silent_s:.1f} s "
                       "(vLLM's worker monitor cannot see another node)")
            self._decide(now, verdict, GuardAction.END, "ending the wait", why)
            self._state(now, verdict, ended=GuardAction.END)
            raise TimeoutError(
                f"enginedead guard: {self.method} worker idle for {idle:.1f} s (hang_s {hang_s:g} s)"
            )
        elif ran >= self.deadline_s and not self._said_deadline:
            self._said_deadline = True
            if verdict is Verdict.SLOW:
                self._decide(now, verdict, GuardAction.WAIT, f"waiting up to {self.cap_s:.0f} s",
                             f"computing ({self._cores * 100:.0f} % CPU)")
            else:
                idle = now - self._busy_at
                self._decide(now, verdict, GuardAction.WARN,
                             f"ending the wait if it stays idle {hang_s - idle:.0f} s more",
                             f"idle for {idle:.1f} s")

    def past_cap(self) -> None:
        """vLLM's wait is about to raise at the guard's cap: say so, once."""
        now = time.monotonic()
        verdict = self._probe(now)
        self._decide(now, verdict, GuardAction.CAP, "past the cap: the engine dies as stock vLLM would",
                     f"still {'computing' if verdict is Verdict.SLOW else 'idle'}")
        self._state(now, verdict, ended=GuardAction.CAP)

    def finish(self) -> None:
        """The step's reply is in (or its wait ended): a probe must not see it running."""
        if self._wrote_state:
            self.core.write_state(None)

    def _state(self, now: float, verdict: Verdict, ended: GuardAction | None = None) -> None:
        procs = self.core.worker_procs()
        self._wrote_state = True
        pid, _, _, node = self._judged()
        self.core.write_state(dict(
            in_step=ended is None, method=self.method, step=self.step, batch=self.batch,
            deadline_s=self.deadline_s, cap_s=round(self.cap_s, 3), sent=self.sent,
            busy_at=self._busy_at, verdict=verdict, cores=round(self._cores, 3),
            worker=pid if procs else 0, ended=ended, updated=now, node=node,
            silent=self._gone.label if self._gone is not None else None,
        ))

    def _probe(self, now: float) -> Verdict:
        """SLOW while any rank computes or records progress; HUNG when none does; DEAD if one is gone.

        Each rank is judged on its own CPU (its compiler children counted): ranks of one step
        meet in collectives, so one that computes keeps the others waiting — on CPU spinning,
        a core busy with nothing but the wait, which its collective mark tells apart.  Another
        node's ranks are judged from the progress they publish; one that stopped publishing
        is gone (``DEAD`` once no rank shows progress), left to no monitor.
        """
        procs = self.core.worker_procs()
        if not procs or any(not reading.alive(p) for p in procs):
            self._gone = None
            return Verdict.DEAD
        remote = self.core.remote_looks()
        self._gone = next((lk for lk in remote if lk.gone), None)
        steps = tuple((lk.record.step, lk.record.running) for lk in remote)
        moved, self._remote_steps = steps != self._remote_steps, steps
        cpu = tuple(reading.cpu_seconds(p) for p in procs)
        sizes = self.core.record_sizes(procs)
        last, self._last = self._last, (now, cpu, sizes)
        if last is None or len(last[1]) != len(cpu):
            return Verdict.SLOW  # the first look: no rate yet
        rates = reading.cores_between(last[1], cpu, now - last[0])
        # a rank that spins in a collective waits for a peer: its CPU is not work
        working = [i for i, p in enumerate(procs) if not waiting_for_a_peer(self.core.marks_dir, p.pid, now)]
        self._busiest = max(working or range(len(rates)), key=rates.__getitem__)
        self._cores = rates[self._busiest] if working else 0.0
        alive = [lk for lk in remote if not lk.gone]
        busiest = max(alive, key=lambda lk: lk.record.cores, default=None)
        if busiest is not None and busiest.record.cores > self._cores:
            self._busiest, self._cores = busiest, busiest.record.cores
        if reading.busy(self._cores) or sizes != last[2] or moved:
            self._busy_at = now
            return Verdict.SLOW
        return Verdict.DEAD if self._gone is not None else Verdict.HUNG

    def _judged(self) -> tuple[int, int | None, str, int | None]:
        """(pid, rank, name, node) of the worker the last look judged: the busiest rank (node None
        on one node; on several, a remote rank's pid is its pid on its own node)."""
        workers = self.core.workers()
        count = self.core.rank_count()
        node = self.core.nodes.node if self.core.remote_looks(cached=True) else None
        if isinstance(self._busiest, RemoteLook):
            r = self._busiest.record
            return r.pid, r.rank, f"VLLM::Worker rank {r.rank} of {count} on node {r.node}", r.node
        if not workers:
            return 0, None, "VLLM::Worker", node
        rank, pid = workers[min(self._busiest, len(workers) - 1)]
        name = f"VLLM::Worker rank {rank} of {count}" if count > 1 else "VLLM::Worker"
        return pid, rank, name + (f" on node {node}" if node is not None else ""), node

    def _decide(self, now: float, verdict: Verdict, action: GuardAction, outcome: str, state: str) -> None:
        pid, rank, name, node = self._judged()
        ran = now - self.sent
        logger.warning(
            "enginedead guard: %s has run %.1f s (deadline %g s); %s pid %d %s, "
            "step %d batch %d; %s",
            self.method, ran, self.deadline_s, name, pid, state, self.step, self.batch, outcome,
        )
        self.core.note(GuardEvent(
            self.method, self.step, self.batch, round(ran, 3), self.deadline_s,
            round(self.cap_s, 3), verdict, action, outcome, pid, now, rank, self.core.rank_count(), node,
        ))


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

    def write_state(self, fields: dict[str, Any] | None) -> None:
        """Rewrite the guard's state: a step's fields while it runs long, None when none runs.

        Once the guard has ended a wait (``ended``), that stays: the engine is dying of it.
        """
        if self.state_path is None or self.guard is None:
            return
        if fields is None:
            fields = {"updated": time.monotonic()}
        if self._ended and not fields.get("ended"):
            return
        self._ended = fields.get("ended") or self._ended
        state = GuardState(
            pid=os.getpid(), front=self.front, hang_s=self.guard.hang_s,
            policy=self.guard.policy_name, **fields,
        )
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
            return min(wait_ms, int(PROBE_EVERY_S * 1000))

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


def remove_stale_states(directory: str, front: int | None = None) -> None:
    """Remove guard states whose engine core is gone (or, given ``front``, that front's), and
    collective marks whose worker is gone (a killed worker leaves its mark)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            worker = mark_pid(name)
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
