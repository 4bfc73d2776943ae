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
from dataclasses import dataclass, replace
from typing import Any

from ..compat import in_core, versions
from ..contract.collectives import waiting_for_a_peer
from ..contract.decisions import GuardAction, Verdict
from ..contract.guardfiles import (
    CoreReady,
    GuardEvent,
    guard_state_path,
    state_dir,
    write_core_ready,
)
from ..contract.names import ENV_DIR, ENV_FRONT_PID, GUARD_POLICY_ENV, PROGRESS_DIR_ENV
from ..logic.inputs.guardconfig import config_from_env, guard_asked, misplaced_policy
from ..process import reading
from ..process.remote import RemoteLook
from .enginecore import EngineCorePlugin, remove_stale_states

#: The wait loop runs thousands of times a second; the worker is looked at this often.
PROBE_EVERY_S = 0.25

#: A healthy step is over before this: no probe, no cost.
FIRST_PROBE_S = 0.5

logger = logging.getLogger("vllm.enginedead")


@dataclass(frozen=True)
class JudgedWorker:
    """The worker a look judged: the busiest rank (on several nodes, ``pid`` is its pid on its own
    node, and ``node`` says which; None on one node)."""

    pid: int
    rank: int | None
    #: as the log line names it: ``VLLM::Worker rank 1 of 2 on node 1``
    name: str
    node: int | None


class StepWatch:
    """One step RPC in flight: when it was sent, its deadlines, what the worker did since."""

    def __init__(
        self, core: EngineCorePlugin, method: str, step: int, batch: int, deadline_s: float, cap_s: float
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
        judged = self._judged()
        self.core.write_state(replace(
            self.core.state(now), in_step=ended is None, method=self.method, step=self.step,
            batch=self.batch, deadline_s=self.deadline_s, cap_s=round(self.cap_s, 3), sent=self.sent,
            busy_at=self._busy_at, verdict=verdict, cores=round(self._cores, 3),
            worker=judged.pid if procs else 0, ended=ended, node=judged.node,
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

    def _judged(self) -> JudgedWorker:
        """The worker the last look judged: the busiest rank."""
        workers = self.core.workers()
        count = self.core.rank_count()
        node = self.core.nodes.node if self.core.remote_looks(cached=True) else None
        if isinstance(self._busiest, RemoteLook):
            r = self._busiest.record
            name = f"VLLM::Worker rank {r.rank} of {count} on node {r.node}"
            return JudgedWorker(r.pid, r.rank, name, r.node)
        if not workers:
            return JudgedWorker(0, None, "VLLM::Worker", node)
        rank, pid = workers[min(self._busiest, len(workers) - 1)]
        name = f"VLLM::Worker rank {rank} of {count}" if count > 1 else "VLLM::Worker"
        return JudgedWorker(pid, rank, name + (f" on node {node}" if node is not None else ""), node)

    def _decide(self, now: float, verdict: Verdict, action: GuardAction, outcome: str, state: str) -> None:
        judged = self._judged()
        ran = now - self.sent
        logger.warning(
            "enginedead guard: %s has run %.1f s (deadline %g s); %s pid %d %s, "
            "step %d batch %d; %s",
            self.method, ran, self.deadline_s, judged.name, judged.pid, state, self.step, self.batch, outcome,
        )
        self.core.note(GuardEvent(
            self.method, self.step, self.batch, round(ran, 3), self.deadline_s, round(self.cap_s, 3),
            verdict, action, outcome, judged.pid, now, judged.rank, self.core.rank_count(), judged.node,
        ))


_tls = threading.local()  # the StepWatch of the reply being waited for on this thread


def _with_watch(watch: StepWatch, call: Callable[[], Any], finish: bool = False) -> Any:
    prev = getattr(_tls, "watch", None)
    _tls.watch = watch
    try:
        return call()
    finally:
        _tls.watch = prev
        if finish:
            watch.finish()


def _wrap_rpc(original: Callable[..., Any], core: EngineCorePlugin) -> Callable[..., Any]:
    def collective_rpc(self: Any, method: Any, timeout: float | None = None, *rest: Any, **kw: Any) -> Any:
        if not (isinstance(method, str) and method in in_core.STEP_RPCS and timeout is not None):
            return original(self, method, timeout, *rest, **kw)
        timeout, deadline = core.begin(self, method, timeout, kw.get("args", rest[0] if rest else ()))
        if deadline is None:
            return original(self, method, timeout, *rest, **kw)
        watch = StepWatch(core, method, core.steps, core.batch, deadline, timeout)
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
            self._watch: StepWatch | None = getattr(_tls, "watch", None)

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


def _install(core: EngineCorePlugin) -> None:
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


def register(environ: Mapping[str, str] | None = None) -> EngineCorePlugin | None:
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
    core = EngineCorePlugin(run_dir, guard, state_path, int(front) if front.isdigit() else os.getppid(),
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
