"""Real vLLM CPU engines: start, generate, gather evidence, stop.

An ``Engine`` is one ``vllm.LLM`` in this process with its process tree
(``VLLM::EngineCore`` → ``VLLM::Worker``).  Its deadline and the worker-side
instructions travel in the environment, set just before the engine starts (vLLM
freezes them in its processes) and only for the engine's own processes.
``EngineHandle`` is what a test sees: a shared engine at that test's batch size.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, Protocol, TypeVar

import psutil
import pytest

from .. import compat
from ..contract.control import Control, write_control
from ..contract.dumps import STACK_SIGNAL, DeadlineStack, deadline_stack_path, read_deadline_stack, stack_path
from ..contract.guardfiles import CoreReady, GuardEvent, guard_events_path, read_core_ready, read_guard_events
from ..contract.names import (
    ENV_DIR,
    ENV_HARNESS_PID,
    GUARD_ENV,
    GUARD_HANG_ENV,
    GUARD_PATH_ENV,
    GUARD_POLICY_ENV,
    GUARD_VARIABLES,
)
from ..contract.steps import StepTime, read_steps, steps_path
from ..face import markers
from ..logic.planning import EngineSpec, GuardSpec, Instructions
from ..logic.sizing import slices
from . import cleanup, ledger
from .cleanup import ProcRef, Reaper, mapped_shm, terminate, unlink_shm
from .liveness import LivenessSettings, ProcessEvidence, snapshot


class Progress(Protocol):
    """Where start-up progress goes; ``done`` ends the run of progress lines."""

    def __call__(self, message: str, done: bool = False) -> None: ...


class EngineStartError(RuntimeError):
    """vLLM could not start an engine for this spec; the message says why."""


class GuardRefused(EngineStartError):
    """The engine core's guard is not what the engine was asked to run with (its own record says)."""


def guard_problem(asked: GuardSpec | None, ready: CoreReady) -> str | None:
    """Why the guard in the engine core is not the one asked for, in one line, or None.

    ``ready`` is the engine core's own start-up record: asked for the guard, it must
    be on with the policy and ``hang_s`` asked for; not asked, it must be off.
    """
    core = f"{compat.ENGINE_CORE_TITLE} (pid {ready.pid})"
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


def refuse(exc: markers.BadMarker) -> NoReturn:
    """A handle's bad argument fails the test in its one line, before the engine sees it."""
    __tracebackhide__ = True
    raise pytest.fail.Exception(str(exc), pytrace=False) from None


class EngineBase:
    """A vLLM engine's process tree and run directory: what every kind of engine shares.

    The run directory holds what the code inside vLLM writes (the step record, stack
    dumps, guard events) and reads (the control file with the deadline and faults).
    Subclasses start vLLM (``start``) and adopt the processes it made.
    """

    kind = "engine"
    #: ask vLLM to stop (``shutdown``) before ending the processes by pid
    graceful_stop = True
    #: seconds between SIGTERM and SIGKILL when the processes are ended by pid
    stop_grace_s = 3.0

    def __init__(self, spec: EngineSpec, reaper: Reaper | None = None) -> None:
        self.spec = spec
        self.procs: list[ProcRef] = []
        self.shm: set[str] = set()
        self.run_dir = tempfile.mkdtemp(prefix="enginedead-")
        self.start_s: float | None = None
        #: started because the engine before it for this spec had died (the pool says so)
        self.restart = False
        self.broken = False  # a call did not return normally: do not reuse
        self.stopped = False
        self.deaths: list[dict[str, Any]] = []
        #: every instruction set this engine ran under, in order
        self.instructions: list[Instructions] = []
        self._epoch = 0
        self._final_steps: list[StepTime] | None = None
        self._final_events: list[GuardEvent] | None = None
        self._reaper = reaper
        #: the run was interrupted: stop without waiting for vLLM's graceful shutdown
        self.hurry = False

    # --- what the code inside vLLM is told ------------------------------------------

    def environment(self, first: Instructions) -> dict[str, str]:
        """The environment the engine's processes start with (and only they).

        The harness sets the guard for every engine: on as its spec says, else
        ``ENGINEDEAD_GUARD=0`` and none of the guard's other variables
        (``cleared_variables``), whatever the caller's environment holds.
        """
        env = {
            **compat.engine_environment(),
            compat.DEADLINE_ENV: first.deadline_env,
            ENV_DIR: self.run_dir,
            ENV_HARNESS_PID: str(os.getpid()),
            GUARD_ENV: "0",
        }
        env.update(compat.scratch_environment(self.run_dir, os.environ))  # removed with the run dir
        if self.spec.cpu_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.spec.cpu_bind
        env.update(self.kv_cache()[0])
        if self.spec.guard is not None:
            env[GUARD_ENV] = "1"
            env[GUARD_HANG_ENV] = repr(self.spec.guard.hang_s)
            env[GUARD_POLICY_ENV] = self.spec.guard.policy
            env[GUARD_PATH_ENV] = os.pathsep.join([*sys.path[:1], os.getcwd()])
        return env

    def kv_cache(self) -> tuple[dict[str, str], dict[str, int]]:
        """How the KV cache is sized: (environment, engine arguments) to start with.

        Given, it is the spec's whole GiB, the user's ``VLLM_CPU_KVCACHE_SPACE`` (inherited)
        or their ``kv_cache_memory_bytes``.  Else what this engine's sequences can fill
        (``slices.kv_cache_bytes``, at most the 1 GiB the harness always gave): the cache is
        allocated at start, where 1 GiB took ~3 s of a 2-core box's engine start.  A vLLM
        or a model config it cannot be sized for gets 1 GiB.
        """
        if self.spec.kv_cache_gib is not None:
            return {compat.KV_CACHE_ENV: str(self.spec.kv_cache_gib)}, {}
        if compat.KV_CACHE_ENV in os.environ or compat.KV_CACHE_ARG in dict(self.spec.extra_args):
            return {}, {}
        length = self.spec.max_model_len
        if length is not None and compat.kv_cache_in_bytes(compat.installed_version()):
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, KeyError):
                with open(os.path.join(self.spec.model, "config.json")) as f:
                    config = json.load(f)
                size = slices.kv_cache_bytes(config, self.spec.max_num_seqs, length)
                return {}, {compat.KV_CACHE_ARG: size}
        return {compat.KV_CACHE_ENV: "1"}, {}

    def cleared_variables(self) -> list[str]:
        """The guard's variables the engine's processes must not inherit (none of them set here)."""
        if self.spec.guard is not None:
            return []  # all of them set by ``environment``
        return [name for name in GUARD_VARIABLES if name != GUARD_ENV]

    def process_environment(self, first: Instructions, base: Mapping[str, str]) -> dict[str, str]:
        """A whole environment for the engine's processes: ``base`` less the cleared, plus ours."""
        cleared = set(self.cleared_variables())
        return {**{k: v for k, v in base.items() if k not in cleared}, **self.environment(first)}

    def instruct(self, instructions: Instructions) -> None:
        """From the next RPC on, the engine runs under this deadline and these faults."""
        self._epoch += 1
        write_control(
            self.run_dir,
            Control(self._epoch, instructions.deadline_whole_s, instructions.injection),
        )
        self.instructions.append(instructions)

    def check_core_ready(self) -> None:
        """The engine core must have loaded our side of the plugin, or deadlines cannot switch;
        and its guard must be the one asked for (``guard_problem``), by its own record."""
        ready = read_core_ready(self.run_dir)
        if ready is None:
            raise EngineStartError(
                "vLLM's engine core did not load the enginedead plugin (its vllm.general_plugins "
                f"entry); is VLLM_PLUGINS={os.environ.get('VLLM_PLUGINS')!r} leaving it out?"
            )
        problem = guard_problem(self.spec.guard, ready)
        if problem:
            raise GuardRefused(problem)

    def guard_refusal(self) -> str | None:
        """The guard's refusal as soon as the engine core has written its record (None so far)."""
        ready = read_core_ready(self.run_dir)
        return None if ready is None else guard_problem(self.spec.guard, ready)

    # --- processes ------------------------------------------------------------------

    def adopt(self, me: psutil.Process, before: set[int]) -> None:
        """Record the processes this start created (our own tree, by pid)."""
        for proc in me.children(recursive=True):
            if proc.pid in before or any(r.pid == proc.pid for r in self.procs):
                continue
            with contextlib.suppress(psutil.Error):
                if proc.ppid() == me.pid and "multiprocessing.resource_tracker" in " ".join(proc.cmdline()):
                    continue  # this process's own multiprocessing helper (an engine core's is the engine's)
                self.procs.append(ProcRef.of(proc))
        self.shm |= mapped_shm(self.procs)
        if self._reaper is not None:
            self._reaper.track(self.run_dir, self.procs, self.shm, self.run_dir)

    @property
    def alive(self) -> bool:
        return not self.stopped and not self.broken

    def start(self, first: Instructions, progress: Progress | None = None) -> EngineBase:
        """Start vLLM, running under ``first`` until told otherwise (subclasses)."""
        raise NotImplementedError

    def mark_ready(self, t0: float) -> None:
        """The start begun at ``t0`` (monotonic) is done: its time, and its line in the ledger."""
        self.start_s = time.monotonic() - t0
        ledger.record(self.kind, self.spec.label(), self.start_s, self.restart)

    def shutdown(self, give_up: Callable[[], bool] | None = None) -> None:
        """Ask vLLM to stop (subclasses); what it leaves is ended by pid in ``stop``.

        The wait ends early once ``give_up()`` is true; without ``give_up`` the processes
        are gone already and only the client's side is closed, briefly.
        """

    def stop(self) -> None:
        """Shut the engine down, then end what remains of its process tree by pid.

        Ctrl-C is held while it runs (``cleanup.held``) and raised when it is done; once
        one came, or the run was interrupted before (``hurry``), vLLM's graceful shutdown
        is skipped: the processes are ended by pid at once, the client closed after.
        Kinds whose graceful shutdown buys nothing skip it always (``graceful_stop``).
        """
        with cleanup.held:
            self.stopped = True
            self.shm |= mapped_shm(self.procs)

            def fast() -> bool:
                return self.hurry or cleanup.held.interrupted

            if self.graceful_stop and not fast():
                self.shutdown(give_up=fast)
            leftover = terminate(self.procs, grace_s=self.stop_grace_s, at_once=fast(), shm=self.shm)
            self.shutdown()
            self._clean_up(leftover)
        if not cleanup.held.holding and cleanup.held.take():
            raise KeyboardInterrupt  # what the user pressed, now that nothing is half-stopped

    def _clean_up(self, leftover: list[ProcRef]) -> None:
        unlink_shm(self.shm)
        # the records outlive their run directory
        self._final_steps, self._final_events = self.steps(), self.guard_events()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self._reaper is not None and not leftover:
            self._reaper.forget(self.run_dir)
        if leftover:
            raise RuntimeError(f"engine processes survived SIGKILL: {leftover}")

    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self.procs]

    @property
    def worker_pids(self) -> list[int]:
        """Processes that run model steps (those with a step record, else by title)."""
        recorded = [r.pid for r in self.procs if self.has_record(r.pid)]
        if recorded:
            return recorded
        titled = []
        for ref in self.procs:
            proc = ref.process()
            with contextlib.suppress(psutil.Error):
                if proc is not None and compat.WORKER_TITLE in " ".join(proc.cmdline()):
                    titled.append(ref.pid)
        return titled

    # --- evidence -----------------------------------------------------------------

    def steps(self) -> list[StepTime]:
        """Every step the engine's workers recorded, oldest first."""
        if self._final_steps is not None:
            return list(self._final_steps)
        out: list[StepTime] = []
        for pid in self.pids:
            out.extend(read_steps(steps_path(self.run_dir, pid), pid))
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

    def capture_stack(self, pid: int, timeout_s: float = 0.4) -> str | None:
        """Ask the worker to dump its Python stack (faulthandler on SIGUSR2); read it."""
        ref = next((r for r in self.procs if r.pid == pid), None)
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

    def liveness(self, window_s: float = 0.2) -> dict[int, ProcessEvidence]:
        return snapshot(self.pids, window_s)


class Engine(EngineBase):
    """One real offline vLLM CPU engine (``vllm.LLM`` in this process) and its processes."""

    # vLLM's own shutdown of an offline engine SIGTERMs its engine core, which does not
    # exit on it (0.32.0: it waits on its worker, then on nothing), and SIGKILLs it after
    # 5 s: 5 s of every stop for nothing the harness needs.  The worker exits on SIGTERM at
    # once; the engine core gets a second, then SIGKILL; the client is closed after.
    graceful_stop = False
    stop_grace_s = 1.0

    def __init__(self, spec: EngineSpec, reaper: Reaper | None = None) -> None:
        super().__init__(spec, reaper)
        self.llm: Any = None
        self._vocab = _vocab_size(spec.model)

    def start(self, first: Instructions, progress: Progress | None = None) -> Engine:
        """Start the engine, running under ``first`` until told otherwise."""
        self.instruct(first)
        env = self.environment(first)
        me = psutil.Process()
        before = {p.pid for p in me.children(recursive=True)}
        kwargs = compat.llm_kwargs(self.spec.model, self.spec.max_num_seqs,
                                   {**dict(self.spec.extra_args), **self.kv_cache()[1]})
        t0 = time.monotonic()
        ticker = _Ticker(progress, f"starting engine ({self.spec.label()})", t0)
        watch = _RefusalWatch(self, me, before)
        try:
            # vLLM configures its logging when first imported: import it inside the
            # engine's environment, which its spawned processes inherit
            with _environ(env, self.cleared_variables()), ticker, watch:
                from vllm import LLM  # here: the plugin loads without vLLM

                self.llm = interruptible(lambda: LLM(**kwargs), "enginedead-start")
            compat.quiet_repr(self.llm)
            self.adopt(me, before)
            self.check_core_ready()
        except BaseException as exc:
            if progress:
                progress(f"engine failed to start after {time.monotonic() - t0:.1f} s", done=True)
            if not isinstance(exc, Exception):  # Ctrl-C, pytest-timeout: stop at once
                self.hurry = True
                self._settle(me, before)
            self.adopt(me, before)
            self.broken = True
            self.stop()
            if watch.refusal is not None:  # the engine core was ended for it: that is the reason
                raise GuardRefused(watch.refusal) from None
            if isinstance(exc, EngineStartError):
                raise
            if isinstance(exc, Exception):
                raise EngineStartError(
                    f"vLLM could not start an engine on {self.spec.model}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            raise
        self.mark_ready(t0)
        if progress:
            progress(
                f"engine ready in {self.start_s:.1f} s ({self.spec.label()}; "
                f"pids {', '.join(str(r.pid) for r in self.procs)})",
                done=True,
            )
        return self

    def _settle(self, me: psutil.Process, before: set[int], limit_s: float = 5.0) -> None:
        """After an interrupted start: wait (briefly) for the engine core vLLM's start thread
        is about to spawn, so that it is stopped with the rest instead of left behind."""
        def spawned() -> bool:
            self.adopt(me, before)
            return bool(self.procs)

        cleanup.wait_until(spawned, limit_s, give_up=lambda: False)

    @property
    def alive(self) -> bool:
        return self.llm is not None and not self.broken

    def shutdown(self, give_up: Callable[[], bool] | None = None) -> None:
        llm, self.llm = self.llm, None
        if llm is None:
            return
        wait_s = 1.0 if give_up is None else 5.0 if self.broken else 10.0
        _bounded(functools.partial(compat.shutdown_llm, llm), wait_s, give_up or (lambda: False))

    def generate(
        self, n: int, max_tokens: int = 8, prompt_len: int = 4,
        arriving: int | Sequence[int] | None = None,
    ) -> list[list[int]]:
        """One concurrent decode batch of ``n`` sequences; token ids per sequence.

        ``arriving``: that many requests join before each step instead of all at once.
        """
        if self.llm is None:
            raise RuntimeError("engine is stopped")
        if self.broken:
            raise RuntimeError("engine is unusable after an earlier failure; it is being replaced")
        rng = random.Random(n * 1000 + prompt_len)
        hi = max(10, self._vocab - 1)
        prompts = [
            compat.token_prompt([rng.randrange(3, hi) for _ in range(prompt_len)])
            for _ in range(n)
        ]
        params = compat.sampling_params(max_tokens)
        ok = False
        try:
            llm = self.llm
            if arriving:
                outputs = interruptible(
                    lambda: compat.generate_arriving(llm, prompts, params, arriving), "enginedead-generate"
                )
            else:
                outputs = interruptible(
                    lambda: llm.generate(prompts, params, use_tqdm=False), "enginedead-generate"
                )
            ok = True
        finally:
            if not ok:
                self.broken = True
        return [compat.output_token_ids(o) for o in outputs]


    def prompts(self, lengths: list[int], seed: int, prefix: list[int] | None = None) -> list[list[int]]:
        """Distinct random token-id prompts of these lengths (the first may start with ``prefix``)."""
        rng = random.Random(seed)
        hi = max(10, self._vocab - 1)
        out = [[rng.randrange(3, hi) for _ in range(n)] for n in lengths]
        if prefix and out:
            out[0][: len(prefix)] = prefix[: len(out[0])]
        return out

    def drive(self, waves: list[tuple[list[list[int]], int]]) -> None:
        """Send waves of (prompts, max_tokens); each once every earlier request has its first token."""
        if self.llm is None or self.broken:
            raise RuntimeError("engine is stopped or unusable")
        ok = False
        try:
            compat.drive(self.llm, [(prompts, compat.sampling_params(n)) for prompts, n in waves])
            ok = True
        finally:
            if not ok:
                self.broken = True


class Handle:
    """What a test holds: a (possibly shared) engine at its batch size and deadline."""

    def __init__(
        self,
        engine: EngineBase,
        batch_size: int,
        instructions: Instructions,
        policy_name: str = "",
        policy_deadline_s: float | None = None,
        liveness_settings: LivenessSettings | None = None,
    ) -> None:
        self._engine = engine
        self.batch_size = batch_size
        #: this test's deadline and faults (the engine may have run others before)
        self.instructions = instructions
        self.policy_name = policy_name
        #: what the active policy would allow at this batch size
        self.policy_deadline_s = policy_deadline_s
        #: how assert_no_false_death judges this engine (the run's options)
        self.liveness_settings = liveness_settings or LivenessSettings()
        #: verdicts on engine deaths seen through this handle (assert_no_false_death)
        self.deaths: list[dict[str, Any]] = []
        self._since = time.monotonic()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} bs{self.batch_size} {self.instructions.describe()}; "
            f"{self._engine.spec.label()}>"
        )

    @property
    def spec(self) -> EngineSpec:
        return self._engine.spec

    @property
    def timeout_s(self) -> float:
        """The execute-model deadline in force for this test, in seconds (as vLLM sees it)."""
        return self.instructions.deadline_whole_s

    @property
    def deadline_source(self) -> str:
        """Where the deadline came from, as a failure message says it."""
        return (
            f"{compat.DEADLINE_ENV}={self.instructions.deadline_env}, "
            f"set from {self.instructions.deadline_source}"
        )

    @property
    def pids(self) -> list[int]:
        return self._engine.pids

    @property
    def worker_pids(self) -> list[int]:
        return self._engine.worker_pids

    @property
    def alive(self) -> bool:
        return self._engine.alive

    def step_times(self) -> list[StepTime]:
        """Per-step wall time and batch size, as the worker recorded them."""
        return self._engine.steps()

    def step_times_since_start(self) -> list[StepTime]:
        """The steps this handle's test ran (the engine may be shared)."""
        return [s for s in self._engine.steps() if s.started >= self._since]

    def guard_events(self) -> list[GuardEvent]:
        """The guard's decisions while this test ran (empty without the guard)."""
        return [e for e in self._engine.guard_events() if e.t >= self._since]

    def running_step(self, pid: int) -> StepTime | None:
        return self._engine.running_step(pid)

    def has_record(self, pid: int) -> bool:
        return self._engine.has_record(pid)

    def deadline_stack(self, pid: int, step: StepTime, wait: bool = True) -> DeadlineStack | None:
        """The worker's own stack at the deadline of ``step``; ``wait=False``: only one already written."""
        return self._engine.deadline_stack(pid, step, self.timeout_s, 0.5 if wait else None)

    def capture_stack(self, pid: int) -> str | None:
        return self._engine.capture_stack(pid)

    def liveness(self) -> dict[int, ProcessEvidence]:
        """A snapshot of every engine process: status, CPU over 0.2 s, RSS."""
        return self._engine.liveness()

    def death_facts(self) -> dict[str, Any]:
        """What a verdict on this engine's death reports beside the process evidence."""
        facts: dict[str, Any] = {
            "batch_size": self.batch_size,
            "deadline_s": self.timeout_s,
            "deadline_source": self.deadline_source,
            "policy": self.policy_name or None,
            "policy_deadline_s": self.policy_deadline_s,
        }
        if self.spec.guard is not None:
            events = self.guard_events()
            if events:
                last = events[-1]
                if last.outcome.startswith("past the cap"):
                    facts["guard_cap_s"] = last.cap_s
                facts["guard"] = (
                    f"{last.verdict}, {last.outcome}: {last.method} had run {last.waited_s:.1f} s "
                    f"(vLLM's deadline {last.deadline_s:g} s, the guard's cap {last.cap_s:g} s; "
                    f"{self.spec.guard.describe()})"
                )
            else:
                facts["guard"] = f"{self.spec.guard.describe()}: no decision recorded"
        return facts

    def note_death(self, finding: dict[str, Any]) -> None:
        self.deaths.append(finding)
        self._engine.deaths.append(finding)

    def stop(self) -> None:
        """Stop the engine now (the next test that needs it gets a fresh one)."""
        self._engine.stop()


class EngineHandle(Handle):
    """What the engine fixtures yield: a real offline engine at one batch size."""

    _engine: Engine

    def generate(
        self, n: int | None = None, max_tokens: int = 8, prompt_len: int = 4,
        arriving: int | Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Run one concurrent decode batch of ``n`` sequences (default: the batch size).

        ``arriving=k``: k requests join before each engine step, as a server's clients
        would, so the decode batch grows while each step prefills only the newcomers;
        ``arriving=[k1, k2, ...]``: k1 before the first step, k2 before the second... (the
        last count repeats), to shape one step: decodes beside newcomers.
        A bad argument fails the test in one line before the engine sees it (the
        engine stays in service).
        """
        __tracebackhide__ = True
        try:
            markers.generate_arguments(n, max_tokens, prompt_len, arriving, self.spec.max_model_len)
        except markers.BadMarker as exc:
            refuse(exc)
        return self._engine.generate(self.batch_size if n is None else n, max_tokens, prompt_len, arriving)


# --- helpers ------------------------------------------------------------------------


@contextlib.contextmanager
def _environ(values: Mapping[str, str], unset: Iterable[str] = ()) -> Iterator[None]:
    """``values`` set and ``unset`` removed in ``os.environ`` for the block, then restored."""
    unset = [k for k in unset if k not in values]
    saved = {k: os.environ.get(k) for k in [*values, *unset]}
    os.environ.update(values)
    for k in unset:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _RefusalWatch:
    """While ``vllm.LLM(...)`` starts: as soon as the engine core's record shows the guard
    refused, end the engine core (ours, by pid), so that the start fails at once instead
    of running on to a ready engine that will not be used."""

    def __init__(self, engine: EngineBase, me: psutil.Process, before: set[int], every_s: float = 0.1):
        self.engine, self.me, self.before, self.every_s = engine, me, before, every_s
        self.refusal: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            ready = read_core_ready(self.engine.run_dir)
            if ready is None:
                continue
            self.refusal = guard_problem(self.engine.spec.guard, ready)
            if self.refusal is not None:
                with contextlib.suppress(psutil.Error):
                    self.engine.adopt(self.me, self.before)  # recorded (and reaped) like any start
                    core = next((r.process() for r in self.engine.procs if r.pid == ready.pid), None)
                    if core is not None:  # ours, pinned by pid and creation time
                        core.kill()
            return

    def __enter__(self) -> _RefusalWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=1)


class _Ticker:
    """Reports "still starting … N s" every ``every_s`` while the body runs."""

    def __init__(self, progress: Progress | None, what: str, t0: float, every_s: float = 15.0):
        self.progress, self.what, self.t0, self.every_s = progress, what, t0, every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        assert self.progress is not None
        while not self._stop.wait(self.every_s):
            self.progress(f"{self.what}: {time.monotonic() - self.t0:.0f} s so far")

    def __enter__(self) -> _Ticker:
        if self.progress is not None:
            self.progress(self.what)
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)


_T = TypeVar("_T")


def interruptible(fn: Callable[[], _T], name: str, on_interrupt: Callable[[], None] | None = None) -> _T:
    """``fn()``, run on a thread of its own while this thread waits for it.

    The waiting thread stays interruptible: Ctrl-C (or pytest-timeout's alarm) raises
    here at once.  vLLM's client blocks its caller where a signal's exception is lost:
    in 0.32.0 the wait for the engine core to start is a pyzmq poll, which takes the
    interrupted call up again instead of raising ``KeyboardInterrupt``, so a Ctrl-C
    waited out the whole start.  On an exception while waiting ``on_interrupt`` runs
    and the exception propagates; the thread is a daemon and ends with what it waits on.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.25)
    except BaseException:
        if on_interrupt is not None:
            on_interrupt()
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def _bounded(fn: Callable[[], None], timeout_s: float, give_up: Callable[[], bool]) -> None:
    """Run ``fn`` on a daemon thread; stop waiting after ``timeout_s``, or once ``give_up()``."""
    thread = threading.Thread(target=_quiet, args=(fn,), daemon=True)
    thread.start()
    cleanup.wait_until(lambda: not thread.is_alive(), timeout_s, give_up)


def _quiet(fn: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        fn()


def _vocab_size(model: str) -> int:
    with contextlib.suppress(OSError, ValueError, TypeError):
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        vocab = cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size")
        if isinstance(vocab, int) and vocab > 10:
            return vocab
    return 1000
