"""The part of pytest-enginedead that runs inside ``VLLM::Worker``.

Loaded by vLLM through the ``vllm.general_plugins`` entry point in every process it
starts.  Inert unless the harness set ``ENGINEDEAD_WORKER_DIR`` for the engine, and
never active in the harness's own process.  When active it wraps the worker's
``execute_model`` to

* append a step record (index, batch size, what it scheduled, start, end) to
  ``steps-<pid>.jsonl``; the step's second RPC, ``sample_tokens``, is recorded as a
  phase of the same step;
* apply fault injection (busy burn per sequence, idle hang, process exit);
* dump its own Python stack when a step reaches the deadline in force (and every
  deadline after that while it runs), with samples of the step until then, into
  ``deadline-stack-<pid>.txt``: where the step was when vLLM gave up, whatever happens
  after;
* let the harness dump its Python stack: ``SIGUSR2`` writes ``stack-<pid>.txt``;
* on several nodes (``ENGINEDEAD_PROGRESS_DIR``), publish the rank's progress where the
  other nodes read it (``progress.Publisher``), and read the control from there: a node on
  another machine shares that directory, not the head's run directory.  Without a run
  directory (a production cluster that only publishes) it records nothing else.

The formats are ``record.py``'s, shared with the harness that reads them.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import functools
import importlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from ..compat import in_worker, versions
from ..contract.control import CRASH_EXIT_CODE, Control, ControlReader, Injection
from ..contract.dumps import (
    MAIN_THREAD_PREFIX,
    STACK_SIGNAL,
    DeadlineStack,
    deadline_stack_path,
    sample_block,
    stack_path,
)
from ..contract.guardfiles import state_dir
from ..contract.names import ENV_DIR, LAYERS_ENV, PROGRESS_DIR_ENV
from ..contract.stepprogress import Phase, ProgressWriter, StepProgress
from ..contract.steps import BEGIN_SHAPE_LINE, END_LINE, SAMPLE_BEGIN_LINE, SAMPLE_END_LINE, steps_path
from ..logic.inputs.guardconfig import guard_asked
from . import layers
from .faults import StepFaults
from .progress import Publisher, StepState

#: The watchdog looks at the armed phase at least this often (a deadline is >= 1 s).
WATCH_EVERY_S = 0.25

#: Until the deadline, the main thread's stack is sampled ``SAMPLES_PER_DEADLINE`` times,
#: evenly from the phase's start (never more often than ``SAMPLE_EVERY_S``): one frame at
#: one instant says where one lucky moment was, and a second before the deadline covers
#: one layer or two of a model; samples across the step say where it spends its time.
SAMPLE_EVERY_S = 0.05

SAMPLES_PER_DEADLINE = 20

#: The watchdog's own clock, whatever a test does to this module's ``time``.
_monotonic = time.monotonic


def _every(deadline_s: float) -> float:
    """Seconds between two samples of a phase under this deadline."""
    return max(SAMPLE_EVERY_S, deadline_s / SAMPLES_PER_DEADLINE)


class DeadlineWatch:
    """The worker's own stack when the phase in progress reaches its deadline.

    The step's thread only *arms* a phase (one tuple assignment at its start, one at
    its end: no syscall, no wake-up).  A daemon thread looks at the armed phase at least
    every ``WATCH_EVERY_S`` and sleeps until it is due: until the deadline it samples the
    main thread's frames ``SAMPLES_PER_DEADLINE`` times, evenly, and at the
    deadline, if the same phase still runs, writes every thread's stack (faulthandler)
    with the samples and a header naming the step; then again a deadline later.  A phase
    that ends first costs nothing more.  The file is replaced whole: a reader sees one
    complete dump (``read_deadline_stack``).
    """

    def __init__(self, path: str, main_ident: int) -> None:
        self.path = path
        self._ident = main_ident
        self._main = f"{MAIN_THREAD_PREFIX}0x{main_ident:016x}\n"
        #: (step, phase, started, deadline_s) of the phase in progress, or None
        self.armed: tuple[int, str, float, float] | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="enginedead-deadline", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.armed = None
        self._closed.set()

    def _run(self) -> None:
        current: tuple[int, str, float, float] | None = None
        samples: list[str] = []
        deadline_at = next_at = math.inf
        while not self._closed.is_set():
            armed = self.armed
            if armed is not current:
                current, samples = armed, []
                deadline_at = armed[2] + armed[3] if armed else math.inf
                next_at = armed[2] + _every(armed[3]) if armed else math.inf
            now = _monotonic()
            if current is not None and now >= next_at:
                if now >= deadline_at:
                    self._dump(current, now, samples)
                    samples = []
                    deadline_at += current[3]
                    next_at = now + _every(current[3])
                else:
                    samples.append(self._sample(deadline_at - now))
                    next_at = min(now + _every(current[3]), deadline_at)
                continue
            self._closed.wait(max(0.0, min(next_at - now, WATCH_EVERY_S)))

    def _sample(self, before_s: float) -> str:
        """The main thread's frames now, innermost first, as faulthandler writes them."""
        frame = sys._current_frames().get(self._ident)
        lines: list[str] = []
        while frame is not None and len(lines) < 200:
            code = frame.f_code
            lines.append(f'  File "{code.co_filename}", line {frame.f_lineno} in {code.co_name}')
            frame = frame.f_back
        return sample_block(before_s, lines)

    def _dump(self, phase: tuple[int, str, float, float], now: float, samples: list[str]) -> None:
        step, name, started, deadline = phase
        head = DeadlineStack(step, name, deadline, now - started, now, "", ()).header(len(samples))
        tmp = f"{self.path}.tmp"
        with contextlib.suppress(OSError):
            with open(tmp, "w") as f:
                f.write(head + self._main)
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
                f.write("".join(samples))
            os.replace(tmp, self.path)


class StepRecorder:
    """Per-process state: the record file, the step counters, the harness's control file, and
    (on several nodes) the publisher of the rank's progress."""

    def __init__(self, run_dir: str | None, deadline_stacks: bool = True,
                 progress_dir: str | None = None, layers_dir: str | None = None) -> None:
        pid = os.getpid()
        control_dir = progress_dir or run_dir
        self.control = ControlReader(control_dir) if control_dir else None
        self.progress_dir = progress_dir
        self.publisher: Publisher | None = None
        #: where this worker's step progress is mapped (``contract.stepprogress``), once its layers are seen
        self.layers_dir = layers_dir
        self.progress: ProgressWriter | None = None
        self._hooked = False
        self._faults = StepFaults()  # the running step's
        self._layer = 0  # layers begun in the running step's forward pass (0: not in one)
        self._in_forward = False
        self.step = 0  # every recorded step of this worker
        self.epoch = -1  # the control epoch the fault steps count from
        self.fault_step = 0  # steps since that epoch began: what the faults count
        self._sample_for: int | None = None  # the step whose sample_tokens comes next
        #: the latest step, as the publisher reads it (single assignments: no lock)
        self._state = StepState()
        self._fd: int | None = None
        self._stack: IO[str] | None = None
        self._watch: DeadlineWatch | None = None
        #: vLLM's own deadline, for a test that set none (read once: vLLM froze it at start)
        self._stock_deadline_s = _stock_deadline_s()
        self._deadline_s = self._stock_deadline_s
        if run_dir is None:
            return
        # one O_APPEND write per record: atomic, unbuffered, no lock, no json.dumps
        self._fd = os.open(
            steps_path(run_dir, pid), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        # kept open for the process's life: faulthandler writes into it on a signal
        self._stack = open(stack_path(run_dir, pid), "w")  # noqa: SIM115
        # the harness picks the main thread's frames out of an all-threads dump
        self._stack.write(f"{MAIN_THREAD_PREFIX}0x{threading.main_thread().ident or 0:016x}\n")
        self._stack.flush()
        faulthandler.register(STACK_SIGNAL, file=self._stack, all_threads=True)
        if deadline_stacks:
            self._watch = DeadlineWatch(deadline_stack_path(run_dir, pid), threading.main_thread().ident or 0)

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
        if self.progress is not None:
            self.progress.remove()
        if self._watch is not None:
            self._watch.close()
        if self._fd is None:
            return
        faulthandler.unregister(STACK_SIGNAL)
        os.close(self._fd)
        if self._stack is not None:
            self._stack.close()

    def step_state(self) -> StepState:
        """Where this rank's steps stand (``progress.StepSource``)."""
        return self._state

    def _write(self, line: bytes) -> None:
        if self._fd is not None:
            os.write(self._fd, line)

    def hook_layers(self, worker: Any) -> None:
        """See each layer of this worker's steps begin (once); its progress record from then on."""
        if self._hooked:
            return
        self._hooked = True
        wanted = os.environ.get(LAYERS_ENV, "").strip() != "0"
        count = layers.install(worker, self.layer_begins) if wanted else 0
        if self.layers_dir:
            with contextlib.suppress(OSError):
                self.progress = ProgressWriter(self.layers_dir, count)

    def layer_begins(self) -> None:
        """A layer of the running step begins (``layers``): noted, then its share of the faults."""
        if not self._in_forward:
            return  # a forward pass outside a recorded step (vLLM's own warm-up)
        self._layer += 1
        if self.progress is not None:
            self.progress.layer_begins(time.monotonic())
        self._faults.at(self._layer)

    def step_progress(self) -> StepProgress | None:
        """Where this rank's step stands inside its layers (``progress.StepSource``)."""
        return self.progress.snapshot() if self.progress is not None else None

    def publish_as(self, node: int, rank: int) -> None:
        """Start publishing this rank's progress (once), if there is a directory for it; at a clean
        exit its last record says so."""
        if self.publisher is None and self.progress_dir:
            self.publisher = Publisher(self.progress_dir, node, rank, self)
            atexit.register(self.publisher.close)

    def run_sample(self, call: Callable[[], Any]) -> Any:
        """The step's second RPC (sampling): same step index, its own begin and end."""
        step, self._sample_for = self._sample_for, None
        if step is None:  # no recorded model step waits for it
            return call()
        began = time.monotonic()
        self._write(SAMPLE_BEGIN_LINE % (step, began))
        if self.progress is not None:
            self.progress.phase_begins(Phase.SAMPLE, began)
        self._arm(step, "sample_tokens", began)
        state = self._state  # the step's execute_model has ended: it runs again, sampling
        self._state = StepState(state.step, state.batch, True, state.began, state.last_s, state.finished)
        try:
            return call()
        finally:
            self._disarm()
            ended = time.monotonic()
            self._write(SAMPLE_END_LINE % (step, ended))
            if self.progress is not None:
                self.progress.phase_begins(Phase.IDLE, ended)
            self._state = StepState(state.step, state.batch, False, state.began, ended - state.began,
                                    state.finished)

    def _arm(self, step: int, phase: str, began: float) -> None:
        if self._watch is not None:
            self._watch.armed = (step, phase, began, self._deadline_s)

    def _disarm(self) -> None:
        if self._watch is not None:
            self._watch.armed = None

    def run_step(
        self,
        batch: int,
        call: Callable[[], Any],
        tokens: int = -1,
        context: int = -1,
        window_context: int = -1,
        read: int = -1,
        window_read: int = -1,
        rank: int = 0,
        node: int = 0,
    ) -> Any:
        """One model step of ``batch`` sequences: ``tokens`` scheduled, ``context`` keys attended,
        ``read`` keys read from the KV cache; the faults run only on the ranks and nodes they name
        (``rank``, ``node``: this worker's)."""
        control = self.control.get() if self.control is not None else Control()  # the test's faults
        if control.epoch != self.epoch:
            self.epoch, self.fault_step = control.epoch, 0
        self.step += 1
        self.fault_step += 1
        step = self.step
        began = time.monotonic()
        shape = (step, batch, tokens, context, window_context, read, window_read, began)
        self._write(BEGIN_SHAPE_LINE % shape)
        finished = self._state.finished
        self._state = StepState(step, batch, True, began, 0.0, finished)
        if self.progress is not None:
            self.progress.begin_step(step, began)
        self._deadline_s = control.deadline_s or self._stock_deadline_s
        self._arm(step, "execute_model", began)
        inj = control.injection if control.injection.applies_to(rank, node) else Injection()
        if inj.crash_at_step == self.fault_step:
            os._exit(CRASH_EXIT_CODE)
        seen = self.progress.layers if self.progress is not None else 0
        self._faults = StepFaults.plan(inj, self.fault_step, batch, seen)
        self._layer, self._in_forward = 0, True
        try:
            self._faults.before_forward()
            return call()
        finally:
            self._in_forward, self._faults = False, StepFaults()
            self._disarm()
            ended = time.monotonic()
            if self.progress is not None:
                self.progress.forward_ends(ended)
            self._write(END_LINE % (step, ended))
            self._state = StepState(step, batch, False, began, ended - began, finished + 1)
            self._sample_for = step


def _stock_deadline_s() -> float:
    """The deadline vLLM applies when the harness's control file names none."""
    try:
        return versions.stock_deadline_s()
    except ValueError:  # vLLM itself refuses such a value; the harness checked it before
        return versions.STOCK_DEADLINE_S


_recorder: StepRecorder | None = None

_windows: dict[int, int | None] = {}


def _window(wrapper: Any) -> int | None:
    """The model's sliding window, read once per worker from its vLLM config."""
    key = id(wrapper)
    if key not in _windows:
        _windows[key] = in_worker.sliding_window(wrapper)
    return _windows[key]


def _get_recorder() -> StepRecorder:
    global _recorder
    if _recorder is None:
        _recorder = StepRecorder(os.environ.get(ENV_DIR) or None,
                                 progress_dir=os.environ.get(PROGRESS_DIR_ENV) or None,
                                 layers_dir=state_dir(os.environ))
    return _recorder


def wrap_execute_model(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        batch = in_worker.step_batch_size(scheduler_output)
        recorder = _get_recorder()
        recorder.hook_layers(self)
        rank, node = in_worker.worker_rank(self), in_worker.worker_node(self)
        recorder.publish_as(node, rank)  # from its first call on, empty steps included
        if batch == 0:
            return method(self, scheduler_output, *args, **kwargs)
        return recorder.run_step(
            batch, lambda: method(self, scheduler_output, *args, **kwargs),
            *in_worker.step_shape(scheduler_output, _window(self)), rank=rank, node=node,
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
    """In a worker process: wrap the worker's step when the harness asks, to publish its progress, or
    for the guard to judge its steps by their progress."""
    if not (os.environ.get(ENV_DIR) or os.environ.get(PROGRESS_DIR_ENV) or guard_asked(os.environ)):
        return
    target = in_worker.worker_step_target(versions.installed_version())
    module_name, class_name, method_name = target
    cls = getattr(importlib.import_module(module_name), class_name)
    method = getattr(cls, method_name)
    if not getattr(method, "__enginedead__", False):
        setattr(cls, method_name, wrap_execute_model(method))
    sample = in_worker.worker_sample_method(versions.installed_version())
    if sample:
        own = cls.__dict__.get(sample)
        if not getattr(own, "__enginedead__", False):
            setattr(cls, sample, wrap_sample_tokens(sample, own))
