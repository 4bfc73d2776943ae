"""Real vLLM CPU engines: start, generate, read the worker's record, stop.

An ``Engine`` is one ``vllm.LLM`` in this process with its process tree
(``VLLM::EngineCore`` → ``VLLM::Worker``).  Its deadline and the worker-side
instructions travel in the environment, set just before the engine starts (vLLM
freezes them in its processes).  ``EngineHandle`` is what a test sees: a shared
engine at that test's batch size.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import psutil

from . import compat, worker
from .cleanup import ProcRef, Reaper, mapped_shm, terminate, unlink_shm
from .liveness import ProcessEvidence, snapshot
from .worker import Injection

class Progress(Protocol):
    """Where start-up progress goes; ``done`` ends the run of progress lines."""

    def __call__(self, message: str, done: bool = False) -> None: ...


@dataclass(frozen=True)
class EngineSpec:
    """Everything that makes two engines different.  Equal specs share one engine."""

    model: str
    max_num_seqs: int
    timeout_s: float
    #: what set the deadline, for messages: "policy reference", "enginedead_timeout marker"
    timeout_source: str = "policy"
    injection: Injection = Injection()
    extra_args: tuple[tuple[str, Any], ...] = ()
    #: cores this engine may use (VLLM_CPU_OMP_THREADS_BIND), None = vLLM decides
    cpu_bind: str | None = None

    @property
    def deadline_env(self) -> str:
        return compat.deadline_env_value(self.timeout_s)

    def label(self) -> str:
        parts = [f"bs{self.max_num_seqs}", f"deadline {self.deadline_env} s"]
        if self.injection.active:
            parts.append(self.injection.describe())
        parts.append(f"model {os.path.basename(self.model.rstrip('/'))}")
        if self.extra_args:
            parts.append(", ".join(f"{k}={v!r}" for k, v in self.extra_args))
        return ", ".join(parts)


@dataclass(frozen=True)
class StepTime:
    """One step as the worker saw it; ``seconds`` is None while it runs."""

    step: int
    batch_size: int
    started: float  # time.monotonic() in the worker (system-wide clock)
    seconds: float | None
    pid: int

    @property
    def running(self) -> bool:
        return self.seconds is None


def read_steps(path: str, pid: int) -> list[StepTime]:
    """Parse one worker's ``steps-<pid>.jsonl``.

    A step is ``execute_model`` (``b``/``e`` lines) plus, in V1, its ``sample_tokens``
    (``sb``/``se``); its time is the sum, and it is running while either phase is.
    """
    times: dict[int, dict[str, Any]] = {}
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line being written
            entry = times.setdefault(rec["i"], {})
            entry[rec["e"]] = rec["t"]
            if rec["e"] == "b":
                entry["n"] = rec["n"]
    steps = []
    for i, t in sorted(times.items()):
        if "b" not in t:
            continue
        running = "e" not in t or ("sb" in t and "se" not in t)
        seconds = None if running else (t["e"] - t["b"]) + (t["se"] - t["sb"] if "sb" in t else 0.0)
        steps.append(StepTime(i, t["n"], t["b"], seconds, pid))
    return steps


def summarize(steps: list[StepTime], now: float | None = None) -> dict[str, Any]:
    """Count, p50 and max of finished steps (seconds), and the largest batch seen.

    Given ``now``, a step still running counts towards the max with the time it
    has run so far (``max_running``): the step a deadline cut short is the longest.
    """
    done = [s.seconds for s in steps if s.seconds is not None]
    longest = max(done) if done else None
    running = False
    if now is not None:
        for s in steps:
            if s.seconds is None and (longest is None or now - s.started > longest):
                longest, running = now - s.started, True
    return {
        "steps": len(done),
        "p50_s": statistics.median(done) if done else None,
        "max_s": longest,
        "max_running": running,
        "max_batch": max((s.batch_size for s in steps), default=0),
    }


class EngineStartError(RuntimeError):
    """vLLM could not start an engine for this spec; the message says why."""


class Engine:
    """One real vLLM CPU engine and every process it started."""

    def __init__(self, spec: EngineSpec, reaper: Reaper | None = None) -> None:
        self.spec = spec
        self.llm: Any = None
        self.procs: list[ProcRef] = []
        self.shm: set[str] = set()
        self.run_dir = tempfile.mkdtemp(prefix="enginedead-")
        self.start_s: float | None = None
        self.broken = False  # a call did not return normally: do not reuse
        self.stopped = False
        self.deaths: list[dict[str, Any]] = []
        self._reaper = reaper
        self._vocab = _vocab_size(spec.model)
        self.version = compat.installed_version()

    # --- life cycle -------------------------------------------------------------

    def start(self, progress: Progress | None = None) -> Engine:
        """Start the engine with the spec's deadline and worker instructions."""
        from vllm import LLM  # imported here: the plugin loads without vLLM

        env = {
            **compat.engine_environment(self.version),
            compat.DEADLINE_ENV: self.spec.deadline_env,
            worker.ENV_DIR: self.run_dir,
            worker.ENV_INJECT: self.spec.injection.to_env(),
            worker.ENV_HARNESS_PID: str(os.getpid()),
        }
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        if self.spec.cpu_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.spec.cpu_bind
        me = psutil.Process()
        before = {p.pid for p in me.children(recursive=True)}
        kwargs = compat.llm_kwargs(
            self.version, self.spec.model, self.spec.max_num_seqs, dict(self.spec.extra_args)
        )
        t0 = time.monotonic()
        ticker = _Ticker(progress, f"starting engine ({self.spec.label()})", t0)
        try:
            with _environ(env), ticker:
                self.llm = LLM(**kwargs)
            compat.quiet_repr(self.llm)
        except BaseException as exc:
            if progress:
                progress(f"engine failed to start after {time.monotonic() - t0:.1f} s", done=True)
            self._adopt(me, before)
            self.broken = True
            self.stop()
            if isinstance(exc, Exception):
                raise EngineStartError(
                    f"vLLM could not start an engine on {self.spec.model}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            raise
        self.start_s = time.monotonic() - t0
        self._adopt(me, before)
        if progress:
            progress(
                f"engine ready in {self.start_s:.1f} s ({self.spec.label()}; "
                f"pids {', '.join(str(r.pid) for r in self.procs)})",
                done=True,
            )
        return self

    def _adopt(self, me: psutil.Process, before: set[int]) -> None:
        """Record the processes this start created (our own tree, by pid)."""
        for proc in me.children(recursive=True):
            if proc.pid in before or any(r.pid == proc.pid for r in self.procs):
                continue
            with contextlib.suppress(psutil.Error):
                if "multiprocessing.resource_tracker" in " ".join(proc.cmdline()):
                    continue  # multiprocessing's own helper, one per process, not the engine's
                self.procs.append(ProcRef.of(proc))
        self.shm |= mapped_shm(self.procs)
        if self._reaper is not None:
            self._reaper.track(self.procs, self.shm)

    @property
    def alive(self) -> bool:
        return self.llm is not None and not self.broken

    def stop(self) -> None:
        """Shut the engine down, then end what remains of its process tree by pid."""
        self.stopped = True
        self.shm |= mapped_shm(self.procs)
        llm, self.llm = self.llm, None
        if llm is not None and not self.broken:
            _bounded(functools.partial(compat.shutdown_llm, llm), 10.0)
        leftover = terminate(self.procs)
        if llm is not None and self.broken:
            _bounded(functools.partial(compat.shutdown_llm, llm), 5.0)  # client-side sockets
        unlink_shm(self.shm)
        if leftover:
            raise RuntimeError(f"engine processes survived SIGKILL: {leftover}")

    # --- running ------------------------------------------------------------------

    def generate(self, n: int, max_tokens: int = 8, prompt_len: int = 4) -> list[list[int]]:
        """One concurrent decode batch of ``n`` sequences; token ids per sequence."""
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
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
            ok = True
        finally:
            if not ok:
                self.broken = True
        return [compat.output_token_ids(o) for o in outputs]

    # --- evidence -----------------------------------------------------------------

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

    def steps(self) -> list[StepTime]:
        out: list[StepTime] = []
        for pid in self.pids:
            out.extend(read_steps(worker.steps_path(self.run_dir, pid), pid))
        return sorted(out, key=lambda s: s.started)

    def running_step(self, pid: int) -> StepTime | None:
        steps = read_steps(worker.steps_path(self.run_dir, pid), pid)
        return steps[-1] if steps and steps[-1].running else None

    def has_record(self, pid: int) -> bool:
        return os.path.exists(worker.steps_path(self.run_dir, pid))

    def capture_stack(self, pid: int, timeout_s: float = 0.4) -> str | None:
        """Ask the worker to dump its Python stack (faulthandler on SIGUSR2); read it."""
        ref = next((r for r in self.procs if r.pid == pid), None)
        path = worker.stack_path(self.run_dir, pid)
        if ref is None or ref.process() is None or not os.path.exists(path):
            return None
        size = os.path.getsize(path)
        os.kill(pid, worker.STACK_SIGNAL)
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

    def liveness(self, window_s: float = 0.2) -> dict[int, ProcessEvidence]:
        return snapshot(self.pids, window_s)


class EngineHandle:
    """What the engine fixtures yield: a (possibly shared) engine at one batch size."""

    def __init__(
        self,
        engine: Engine,
        batch_size: int,
        policy_name: str = "",
        policy_timeout_s: float | None = None,
    ) -> None:
        self._engine = engine
        self.batch_size = batch_size
        self.policy_name = policy_name
        #: what the active policy would allow at this batch size
        self.policy_timeout_s = policy_timeout_s
        #: verdicts on engine deaths seen through this handle (assert_no_false_death)
        self.deaths: list[dict[str, Any]] = []
        self._since = time.monotonic()

    def __repr__(self) -> str:
        return f"<EngineHandle bs{self.batch_size} {self._engine.spec.label()}>"

    @property
    def spec(self) -> EngineSpec:
        return self._engine.spec

    @property
    def timeout_s(self) -> float:
        """The execute-model deadline in force in this engine, in seconds (as vLLM sees it)."""
        return float(self._engine.spec.deadline_env)

    @property
    def timeout_source(self) -> str:
        return f"{compat.DEADLINE_ENV}={self.spec.deadline_env}, set from {self.spec.timeout_source}"

    @property
    def pids(self) -> list[int]:
        return self._engine.pids

    @property
    def worker_pids(self) -> list[int]:
        return self._engine.worker_pids

    @property
    def alive(self) -> bool:
        return self._engine.alive

    def generate(
        self, n: int | None = None, max_tokens: int = 8, prompt_len: int = 4
    ) -> list[list[int]]:
        """Run one concurrent decode batch of ``n`` sequences (default: the batch size)."""
        return self._engine.generate(self.batch_size if n is None else n, max_tokens, prompt_len)

    def step_times(self) -> list[StepTime]:
        """Per-step wall time and batch size, as the worker recorded them."""
        return self._engine.steps()

    def step_times_since_start(self) -> list[StepTime]:
        """The steps this handle's test ran (the engine may be shared)."""
        return [s for s in self._engine.steps() if s.started >= self._since]

    def running_step(self, pid: int) -> StepTime | None:
        return self._engine.running_step(pid)

    def has_record(self, pid: int) -> bool:
        return self._engine.has_record(pid)

    def capture_stack(self, pid: int) -> str | None:
        return self._engine.capture_stack(pid)

    def liveness(self) -> dict[int, ProcessEvidence]:
        """A snapshot of every engine process: status, CPU over 0.2 s, RSS."""
        return self._engine.liveness()

    def note_death(self, record: dict[str, Any]) -> None:
        self.deaths.append(record)
        self._engine.deaths.append(record)

    def stop(self) -> None:
        """Stop the engine now (the next test that needs it gets a fresh one)."""
        self._engine.stop()


# --- helpers ------------------------------------------------------------------------


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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


def _bounded(fn: Callable[[], None], timeout_s: float) -> None:
    """Run ``fn`` on a daemon thread; give up waiting after ``timeout_s``."""
    thread = threading.Thread(target=_quiet, args=(fn,), daemon=True)
    thread.start()
    thread.join(timeout_s)


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


def budget_s(spec: EngineSpec, start_allowance_s: float = 180.0) -> float:
    """A pytest-timeout budget for a test on this engine: start-up plus two deadlines."""
    return math.ceil(start_allowance_s + 2 * float(spec.deadline_env) + 60)

