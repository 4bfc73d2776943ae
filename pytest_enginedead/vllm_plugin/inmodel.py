"""Where a worker's step is inside its model: the layers seen as they begin, the step's progress
record, and the faults that live in the layers.

The step recorder (``worker.StepRecorder``) tells it when a step begins and its forward pass ends,
and when sampling begins and ends; vLLM's attention calls it as each layer begins (``layers``).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from ..contract.control import Injection
from ..contract.names import LAYERS_ENV
from ..contract.stepprogress import Phase, ProgressWriter, StepProgress
from . import layers
from .faults import StepFaults


class ModelSteps:
    """One worker's steps inside its model: progress (``contract.stepprogress``) and layer faults."""

    def __init__(self, layers_dir: str | None) -> None:
        #: where this worker's step progress is mapped, once its layers are seen (None: nowhere)
        self.layers_dir = layers_dir
        self.progress: ProgressWriter | None = None
        self._hooked = False
        self._faults = StepFaults()  # the running step's
        self._layer = 0  # layers begun in the running step's forward pass
        self._in_forward = False

    @property
    def layers(self) -> int:
        """The model's attention layers on this rank, as seen (0: not seen)."""
        return self.progress.layers if self.progress is not None else 0

    def hook(self, worker: Any) -> None:
        """See each layer of this worker's steps begin (once), unless ``ENGINEDEAD_LAYER_PROGRESS=0``;
        the progress record from then on."""
        if self._hooked:
            return
        self._hooked = True
        wanted = os.environ.get(LAYERS_ENV, "").strip() != "0"
        count = layers.install(worker, self.layer_begins) if wanted else 0
        if self.layers_dir:
            with contextlib.suppress(OSError):
                self.progress = ProgressWriter(self.layers_dir, count)

    def begin(self, step: int, began: float, inj: Injection, fault_step: int, batch: int,
              tokens: int = 0) -> None:
        """A step of ``batch`` sequences and ``tokens`` scheduled tokens (0: not known) begins: its
        progress, and its faults planned in its layers (run those that go before its forward pass)."""
        if self.progress is not None:
            self.progress.begin_step(step, began, tokens)
        self._faults = StepFaults.plan(inj, fault_step, batch, self.layers)
        self._layer, self._in_forward = 0, True
        self._faults.before_forward()

    def layer_begins(self) -> None:
        """A layer of the running step begins (``layers``): noted, then its share of the faults."""
        if not self._in_forward:
            return  # a forward pass outside a recorded step (vLLM's own warm-up)
        self._layer += 1
        if self.progress is not None:
            self.progress.layer_begins(time.monotonic())
        self._faults.at(self._layer)

    def forward_ends(self, ended: float) -> int:
        """The forward pass returned; the layers it was seen to go through (-1: its layers are not seen)."""
        self._in_forward, self._faults = False, StepFaults()
        if self.progress is not None:
            self.progress.forward_ends(ended)
        return self._layer if self.layers else -1

    def phase_begins(self, phase: Phase, at: float) -> None:
        """Sampling begins, or the step ends (``Phase.IDLE``)."""
        if self.progress is not None:
            self.progress.phase_begins(phase, at)

    def snapshot(self) -> StepProgress | None:
        """Where the step stands inside its layers (None: no record kept)."""
        return self.progress.snapshot() if self.progress is not None else None

    def close(self) -> None:
        if self.progress is not None:
            self.progress.remove()
