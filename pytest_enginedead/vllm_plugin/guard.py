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
import multiprocessing
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from ..compat import in_core, versions
from ..contract.guardfiles import (
    CoreReady,
    guard_state_path,
    state_dir,
    write_core_ready,
)
from ..contract.names import ENV_DIR, ENV_FRONT_PID, GUARD_POLICY_ENV, PROGRESS_DIR_ENV
from ..logic.inputs.guardconfig import (
    GuardConfig,
    config_from_env,
    guard_asked,
    metrics_from_env,
    misplaced_policy,
)
from .enginecore import EngineCorePlugin, remove_stale_states
from .stepmetrics import StepMetrics, StepRpc
from .watch import StepWatch

logger = logging.getLogger("vllm.enginedead")


_tls = threading.local()  # the StepWatch of the reply being waited for on this thread


def _with_watch(watch: StepWatch | None, call: Callable[[], Any]) -> Any:
    prev = getattr(_tls, "watch", None)
    _tls.watch = watch
    try:
        return call()
    finally:
        _tls.watch = prev


def _awaited(rpc: StepRpc, call: Callable[[], Any]) -> Any:
    """The step RPC's reply, read with its watch in place; the RPC is done when it came or raised."""
    try:
        result = _with_watch(rpc.watch, call)
    except BaseException as exc:
        rpc.done(exc)
        raise
    return result


def _wrap_rpc(original: Callable[..., Any], core: EngineCorePlugin) -> Callable[..., Any]:
    def collective_rpc(self: Any, method: Any, timeout: float | None = None, *rest: Any, **kw: Any) -> Any:
        if not (isinstance(method, str) and method in in_core.STEP_RPCS and timeout is not None):
            return original(self, method, timeout, *rest, **kw)
        timeout, deadline = core.begin(self, method, timeout, kw.get("args", rest[0] if rest else ()))
        rpc = core.step_rpc(method, timeout, deadline)
        if rpc is None:
            return original(self, method, timeout, *rest, **kw)
        result = _awaited(rpc, lambda: original(self, method, timeout, *rest, **kw))
        inner = getattr(result, "get_response", None) if isinstance(result, Future) else None
        if callable(inner):  # non_block: the reply is read later, by result()
            def get_response() -> Any:
                reply = _awaited(rpc, inner)
                rpc.done(None)
                return reply

            result.get_response = get_response
        else:
            rpc.done(None)
        return result

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
            return min(wait_ms, watch.ms_to_next_look())

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
    guard, problem = _asked_guard(environ)
    metrics = _asked_metrics(environ)
    if run_dir is None and guard is None and not metrics:
        return None  # nothing asked for: nothing in vLLM is touched
    core = _core_plugin(environ, run_dir, guard)
    if metrics:
        core.metrics = StepMetrics.start(environ, guard, guard_asked(environ), core.front)
    _install(core)
    if guard is not None:
        core.write_state(None)
        logger.warning(
            "enginedead guard on: policy %s caps each step, hang_s %g s; its state for "
            "`enginedead probe`: %s", guard.policy_name, guard.hang_s, core.state_path,
        )
    if run_dir:
        with contextlib.suppress(OSError):
            write_core_ready(run_dir, _core_ready(environ, guard, problem))
    return core


def _asked_guard(environ: Mapping[str, str]) -> tuple[GuardConfig | None, str | None]:
    """The guard the environment asks for (or None) and why it cannot be had; both said in the log."""
    guard, problem = config_from_env(environ, versions.installed_version())
    if problem:
        logger.error("enginedead guard: %s; the guard stays off", problem)
    misplaced = misplaced_policy(environ)
    if misplaced:
        logger.warning("enginedead guard: %s", misplaced)
    return guard, problem


def _asked_metrics(environ: Mapping[str, str]) -> bool:
    """Whether the engine core keeps its figures for ``/metrics``; a bad ENGINEDEAD_METRICS is logged."""
    metrics, problem = metrics_from_env(environ)
    if problem:
        logger.error("enginedead metrics: %s", problem)
    return metrics


def _core_plugin(
    environ: Mapping[str, str], run_dir: str | None, guard: GuardConfig | None
) -> EngineCorePlugin:
    """The engine core's plugin; with a guard, its state file's path (stale states of dead
    processes removed)."""
    state_path = None
    if guard is not None:
        directory = state_dir(environ)
        state_path = guard_state_path(directory, os.getpid())
        remove_stale_states(directory)
    front = environ.get(ENV_FRONT_PID, "")
    core = EngineCorePlugin(run_dir, guard, state_path, int(front) if front.isdigit() else os.getppid(),
                            environ.get(PROGRESS_DIR_ENV) or None)
    core.marks_dir = state_dir(environ)
    return core


def _core_ready(environ: Mapping[str, str], guard: GuardConfig | None, problem: str | None) -> CoreReady:
    """The guard's start-up record for the harness: on with which policy and ``hang_s``, or why not."""
    return CoreReady(
        pid=os.getpid(), guard=guard is not None, asked=guard_asked(environ),
        policy=guard.spec if guard else (environ.get(GUARD_POLICY_ENV, "").strip() or None),
        policy_name=guard.policy_name if guard else None,
        hang_s=guard.hang_s if guard else None, problem=problem,
    )
