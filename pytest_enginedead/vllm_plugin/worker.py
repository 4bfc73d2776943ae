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
import functools
import importlib
import os
import time
from collections.abc import Callable
from typing import Any

from ..compat import in_worker, versions
from ..contract.control import CRASH_EXIT_CODE, Control, ControlReader, Injection
from ..contract.guardfiles import state_dir
from ..contract.names import ENV_DIR, PROGRESS_DIR_ENV
from ..contract.stepprogress import Phase, StepProgress
from ..contract.steps import BEGIN_SHAPE_LINE, END_LAYERS_LINE, SAMPLE_BEGIN_LINE, SAMPLE_END_LINE, steps_path
from ..logic import releases
from ..logic.inputs.guardconfig import guard_asked, metrics_from_env
from .inmodel import ModelSteps
from .progress import Publisher, StepState
from .stackdumps import StackDumps


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
        #: where the step is inside its model (``inmodel``): its progress record, the layer faults
        self.model = ModelSteps(layers_dir)
        self.step = 0  # every recorded step of this worker
        self.epoch = -1  # the control epoch the fault steps count from
        self.fault_step = 0  # steps since that epoch began: what the faults count
        self._sample_for: int | None = None  # the step whose sample_tokens comes next
        #: the latest step, as the publisher reads it (single assignments: no lock)
        self._state = StepState()
        self._fd: int | None = None
        self._dumps: StackDumps | None = None
        #: vLLM's own deadline, for a test that set none (read once: vLLM froze it at start)
        self._stock_deadline_s = _stock_deadline_s()
        self._deadline_s = self._stock_deadline_s
        if run_dir is None:
            return
        # one O_APPEND write per record: atomic, unbuffered, no lock, no json.dumps
        self._fd = os.open(
            steps_path(run_dir, pid), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        self._dumps = StackDumps(run_dir, pid, deadline_stacks)

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
        self.model.close()
        if self._dumps is not None:
            self._dumps.close()
        if self._fd is not None:
            os.close(self._fd)

    def step_state(self) -> StepState:
        """Where this rank's steps stand (``progress.StepSource``)."""
        return self._state

    def _write(self, line: bytes) -> None:
        if self._fd is not None:
            os.write(self._fd, line)

    def hook_layers(self, worker: Any) -> None:
        """See each layer of this worker's steps begin (once)."""
        self.model.hook(worker)

    def step_progress(self) -> StepProgress | None:
        """Where this rank's step stands inside its layers (``progress.StepSource``)."""
        return self.model.snapshot()

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
        self.model.phase_begins(Phase.SAMPLE, began)
        self._arm(step, "sample_tokens", began)
        state = self._state  # the step's execute_model has ended: it runs again, sampling
        self._state = StepState(state.step, state.batch, True, state.began, state.last_s, state.finished)
        try:
            return call()
        finally:
            self._disarm()
            ended = time.monotonic()
            self._write(SAMPLE_END_LINE % (step, ended))
            self.model.phase_begins(Phase.IDLE, ended)
            self._state = StepState(state.step, state.batch, False, state.began, ended - state.began,
                                    state.finished)

    def _arm(self, step: int, phase: str, began: float) -> None:
        if self._dumps is not None:
            self._dumps.arm(step, phase, began, self._deadline_s)

    def _disarm(self) -> None:
        if self._dumps is not None:
            self._dumps.disarm()

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
        self._deadline_s = control.deadline_s or self._stock_deadline_s
        self._arm(step, "execute_model", began)
        inj = control.injection if control.injection.applies_to(rank, node) else Injection()
        if inj.crash_at_step == self.fault_step:
            os._exit(CRASH_EXIT_CODE)
        try:
            self.model.begin(step, began, inj, self.fault_step, batch, max(tokens, 0))
            return call()
        finally:
            self._disarm()
            ended = time.monotonic()
            seen = self.model.forward_ends(ended)
            self._write(END_LAYERS_LINE % (step, ended, seen))
            self._state = StepState(step, batch, False, began, ended - began, finished + 1)
            self._sample_for = step


def _stock_deadline_s() -> float:
    """The deadline vLLM applies when the harness's control file names none."""
    try:
        return releases.stock_deadline_s()
    except ValueError:  # vLLM itself refuses such a value; the harness checked it before
        return releases.STOCK_DEADLINE_S


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
    for the guard to judge its steps (and the metrics to show them) by their progress."""
    if not (os.environ.get(ENV_DIR) or os.environ.get(PROGRESS_DIR_ENV) or guard_asked(os.environ)
            or metrics_from_env(os.environ)[0]):
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
