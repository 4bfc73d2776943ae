"""The part of pytest-enginedead that runs inside ``VLLM::Worker``.

Loaded by vLLM through the ``vllm.general_plugins`` entry point in every process it
starts.  Inert unless the harness set ``ENGINEDEAD_WORKER_DIR`` for the engine, and
never active in the harness's own process.  When active it wraps the worker's
``execute_model`` to

* append a step record (index, batch size, what it scheduled, start, end) to
  ``steps-<pid>.jsonl``; the step's second RPC, ``sample_tokens``, is recorded as a
  phase of the same step;
* apply fault injection (busy burn per sequence, idle hang, process exit);
* let the harness dump its Python stack: ``SIGUSR2`` writes ``stack-<pid>.txt``.

The formats are ``record.py``'s, shared with the harness that reads them.
"""

from __future__ import annotations

import faulthandler
import functools
import importlib
import os
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from . import compat, record


def burn(seconds: float) -> None:
    """Keep one core busy for ``seconds``, in Python, like a slow step would."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for _ in range(2000):
            x += 1


class StepRecorder:
    """Per-process state: the record file, the step counters, the harness's control file."""

    def __init__(self, run_dir: str) -> None:
        pid = os.getpid()
        self.control = record.ControlReader(run_dir)
        self.step = 0  # every recorded step of this worker
        self.epoch = -1  # the control epoch the fault steps count from
        self.fault_step = 0  # steps since that epoch began: what the faults count
        self._sample_for: int | None = None  # the step whose sample_tokens comes next
        # one O_APPEND write per record: atomic, unbuffered, no lock, no json.dumps
        self._fd = os.open(
            record.steps_path(run_dir, pid), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        # kept open for the process's life: faulthandler writes into it on a signal
        self._stack: IO[str] = open(record.stack_path(run_dir, pid), "w")  # noqa: SIM115
        # the harness picks the main thread's frames out of an all-threads dump
        self._stack.write(f"{record.MAIN_THREAD_PREFIX}0x{threading.main_thread().ident or 0:016x}\n")
        self._stack.flush()
        faulthandler.register(record.STACK_SIGNAL, file=self._stack, all_threads=True)

    def close(self) -> None:
        faulthandler.unregister(record.STACK_SIGNAL)
        os.close(self._fd)
        self._stack.close()

    def run_sample(self, call: Callable[[], Any]) -> Any:
        """The step's second RPC (sampling): same step index, its own begin and end."""
        step, self._sample_for = self._sample_for, None
        if step is None:  # no recorded model step waits for it
            return call()
        os.write(self._fd, record.SAMPLE_BEGIN_LINE % (step, time.monotonic()))
        try:
            return call()
        finally:
            os.write(self._fd, record.SAMPLE_END_LINE % (step, time.monotonic()))

    def run_step(
        self,
        batch: int,
        call: Callable[[], Any],
        tokens: int = -1,
        context: int = -1,
        window_context: int = -1,
    ) -> Any:
        """One model step of ``batch`` sequences: ``tokens`` scheduled, ``context`` keys attended."""
        control = self.control.get()  # once per step: the faults of the test running now
        if control.epoch != self.epoch:
            self.epoch, self.fault_step = control.epoch, 0
        self.step += 1
        self.fault_step += 1
        step = self.step
        line = record.BEGIN_SHAPE_LINE % (step, batch, tokens, context, window_context, time.monotonic())
        os.write(self._fd, line)
        inj = control.injection
        if inj.crash_at_step == self.fault_step:
            os._exit(record.CRASH_EXIT_CODE)
        if inj.hang_at_step == self.fault_step:
            threading.Event().wait()  # idle forever: alive, not computing
        if inj.slow_s_per_seq:
            burn(inj.slow_s_per_seq * batch)
        try:
            return call()
        finally:
            os.write(self._fd, record.END_LINE % (step, time.monotonic()))
            self._sample_for = step


_recorder: StepRecorder | None = None
_windows: dict[int, int | None] = {}


def _window(wrapper: Any) -> int | None:
    """The model's sliding window, read once per worker from its vLLM config."""
    key = id(wrapper)
    if key not in _windows:
        _windows[key] = compat.sliding_window(wrapper)
    return _windows[key]


def _get_recorder() -> StepRecorder:
    global _recorder
    if _recorder is None:
        _recorder = StepRecorder(os.environ[record.ENV_DIR])
    return _recorder


def wrap_execute_model(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        batch = compat.step_batch_size(scheduler_output)
        if batch == 0:
            return method(self, scheduler_output, *args, **kwargs)
        return _get_recorder().run_step(
            batch, lambda: method(self, scheduler_output, *args, **kwargs),
            *compat.step_shape(scheduler_output, _window(self)),
        )

    execute_model.__enginedead__ = True  # type: ignore[attr-defined]
    return execute_model


def wrap_sample_tokens(name: str, method: Callable[..., Any] | None) -> Callable[..., Any]:
    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        target = method or getattr(self.worker, name)  # forwarded, like vLLM's __getattr__
        call = (lambda: target(self, *args, **kwargs)) if method else (lambda: target(*args, **kwargs))
        return _get_recorder().run_sample(call)

    sample_tokens.__enginedead__ = True  # type: ignore[attr-defined]
    return sample_tokens


def register() -> None:
    """In a worker process: wrap the worker's step when the harness asks."""
    if not os.environ.get(record.ENV_DIR):
        return
    target = compat.worker_step_target(compat.installed_version())
    module_name, class_name, method_name = target
    cls = getattr(importlib.import_module(module_name), class_name)
    method = getattr(cls, method_name)
    if not getattr(method, "__enginedead__", False):
        setattr(cls, method_name, wrap_execute_model(method))
    sample = compat.worker_sample_method(compat.installed_version())
    if sample:
        own = cls.__dict__.get(sample)
        if not getattr(own, "__enginedead__", False):
            setattr(cls, sample, wrap_sample_tokens(sample, own))
