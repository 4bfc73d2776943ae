"""The part of pytest-enginedead that runs inside vLLM's own processes.

Loaded by vLLM through the ``vllm.general_plugins`` entry point in every process it
starts.  Inert unless the harness set ``ENGINEDEAD_WORKER_DIR`` for the engine, and
never active in the harness's own process.  When active it wraps the worker's
``execute_model`` to

* append a step record (index, batch size, start, end) to ``steps-<pid>.jsonl``;
  the step's second RPC, ``sample_tokens``, is recorded as a phase of the same step;
* apply fault injection (busy burn per sequence, idle hang, process exit);
* let the harness dump its Python stack: ``SIGUSR2`` writes ``stack-<pid>.txt``.
"""

from __future__ import annotations

import faulthandler
import functools
import importlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import IO, Any

from . import compat

ENV_DIR = "ENGINEDEAD_WORKER_DIR"
ENV_INJECT = "ENGINEDEAD_WORKER_INJECT"
ENV_HARNESS_PID = "ENGINEDEAD_HARNESS_PID"
STACK_SIGNAL = signal.SIGUSR2
CRASH_EXIT_CODE = 86


@dataclass(frozen=True)
class Injection:
    """Faults applied in the worker; steps are counted from 1, empty steps skipped."""

    slow_s_per_seq: float = 0.0
    hang_at_step: int | None = None
    crash_at_step: int | None = None

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, raw: str | None) -> Injection:
        return cls(**json.loads(raw)) if raw else cls()

    @property
    def active(self) -> bool:
        return bool(self.slow_s_per_seq or self.hang_at_step or self.crash_at_step)

    def describe(self) -> str:
        parts = []
        if self.slow_s_per_seq:
            parts.append(f"busy {self.slow_s_per_seq:g} s/seq")
        if self.hang_at_step:
            parts.append(f"hang at step {self.hang_at_step}")
        if self.crash_at_step:
            parts.append(f"crash at step {self.crash_at_step}")
        return ", ".join(parts) or "none"


def steps_path(run_dir: str, pid: int) -> str:
    return os.path.join(run_dir, f"steps-{pid}.jsonl")


def stack_path(run_dir: str, pid: int) -> str:
    return os.path.join(run_dir, f"stack-{pid}.txt")


def burn(seconds: float) -> None:
    """Keep one core busy for ``seconds``, in Python, like a slow step would."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for _ in range(2000):
            x += 1


class _StepRecorder:
    """Per-process state: the record file, the step counter, the faults."""

    def __init__(self, run_dir: str, injection: Injection) -> None:
        pid = os.getpid()
        self.injection = injection
        self.step = 0
        self._sample_for: int | None = None  # the step whose sample_tokens comes next
        # one O_APPEND write per record: atomic, unbuffered, no lock, no json.dumps
        self._fd = os.open(steps_path(run_dir, pid), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._stack: IO[str] = open(stack_path(run_dir, pid), "w")
        # the harness picks the main thread's frames out of an all-threads dump
        self._stack.write(f"main-thread 0x{threading.main_thread().ident or 0:016x}\n")
        self._stack.flush()
        faulthandler.register(STACK_SIGNAL, file=self._stack, all_threads=True)

    def run_sample(self, call: Callable[[], Any]) -> Any:
        """The step's second RPC (sampling): same step index, its own begin and end."""
        step, self._sample_for = self._sample_for, None
        if step is None:  # no recorded model step waits for it
            return call()
        os.write(self._fd, b'{"e":"sb","i":%d,"t":%.6f}\n' % (step, time.monotonic()))
        try:
            return call()
        finally:
            os.write(self._fd, b'{"e":"se","i":%d,"t":%.6f}\n' % (step, time.monotonic()))

    def run_step(self, batch: int, call: Callable[[], Any]) -> Any:
        self.step += 1
        step = self.step
        os.write(self._fd, b'{"e":"b","i":%d,"n":%d,"t":%.6f}\n' % (step, batch, time.monotonic()))
        inj = self.injection
        if inj.crash_at_step == step:
            os._exit(CRASH_EXIT_CODE)
        if inj.hang_at_step == step:
            threading.Event().wait()  # idle forever: alive, not computing
        if inj.slow_s_per_seq:
            burn(inj.slow_s_per_seq * batch)
        try:
            return call()
        finally:
            os.write(self._fd, b'{"e":"e","i":%d,"t":%.6f}\n' % (step, time.monotonic()))
            self._sample_for = step


_recorder: _StepRecorder | None = None


def _get_recorder() -> _StepRecorder:
    global _recorder
    if _recorder is None:
        _recorder = _StepRecorder(
            os.environ[ENV_DIR], Injection.from_env(os.environ.get(ENV_INJECT))
        )
    return _recorder


def _wrap(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        batch = compat.step_batch_size(scheduler_output)
        if batch == 0:
            return method(self, scheduler_output, *args, **kwargs)
        return _get_recorder().run_step(
            batch, lambda: method(self, scheduler_output, *args, **kwargs)
        )

    execute_model.__enginedead__ = True  # type: ignore[attr-defined]
    return execute_model


def _wrap_sample(name: str, method: Callable[..., Any] | None) -> Callable[..., Any]:
    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        target = method or getattr(self.worker, name)  # forwarded, like vLLM's __getattr__
        call = (lambda: target(self, *args, **kwargs)) if method else (lambda: target(*args, **kwargs))
        return _get_recorder().run_sample(call)

    sample_tokens.__enginedead__ = True  # type: ignore[attr-defined]
    return sample_tokens


def register() -> None:
    """vLLM general-plugin entry: wrap the worker's step when the harness asks."""
    if not os.environ.get(ENV_DIR):
        return
    if os.environ.get(ENV_HARNESS_PID) == str(os.getpid()):
        return
    target = compat.worker_step_target(compat.installed_version())
    module_name, class_name, method_name = target
    cls = getattr(importlib.import_module(module_name), class_name)
    method = getattr(cls, method_name)
    if not getattr(method, "__enginedead__", False):
        setattr(cls, method_name, _wrap(method))
    sample = compat.worker_sample_method(compat.installed_version())
    if sample:
        own = cls.__dict__.get(sample)
        if not getattr(own, "__enginedead__", False):
            setattr(cls, sample, _wrap_sample(sample, own))
