"""The faults one step of ``VLLM::Worker`` runs (the harness's ``Injection``), placed in its layers.

A slow step burns CPU spread over its layers, so it advances as real compute does; a hang (idle)
or a spin (100 % CPU, a livelock) stops the step in its middle layer, after the layers before it
have advanced.  Where the worker's layers are not seen (no attention layer found), the burn runs
before the forward pass, and the hang and the spin stop it there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..contract.control import Injection


def burn(seconds: float) -> None:
    """Keep one core busy for ``seconds``, in Python, like a slow step would."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for _ in range(2000):
            x += 1


def hang() -> None:
    """Block idle forever: alive, not computing."""
    threading.Event().wait()


def spin() -> None:
    """Burn a core forever without advancing: a livelock."""
    while True:
        burn(1.0)


@dataclass(frozen=True)
class StepFaults:
    """What one step runs: ``burn_s`` of CPU, and where it stops (``stop``: hang or spin) if it does."""

    burn_s: float = 0.0
    #: how the step stops (``hang`` or ``spin``), or None when it does not
    stop: Callable[[], None] | None = None
    #: the layer (from 1) that burns its share first and then stops; 0: before the forward pass
    at_layer: int = 0
    layers: int = 0

    @classmethod
    def plan(cls, inj: Injection, step: int, batch: int, layers: int) -> StepFaults:
        """The faults of the ``step``-th step (counted as the faults count) of ``batch`` sequences, on a
        model of ``layers`` seen layers (0: none seen)."""
        stop = hang if inj.hang_at_step == step else spin if inj.spin_at_step == step else None
        middle = (layers + 1) // 2 if layers else 0
        return cls(inj.slow_s_per_seq * batch, stop, middle if stop else 0, layers)

    def before_forward(self) -> None:
        """Before the model runs: all of it where the layers are not seen."""
        if not self.layers:
            if self.burn_s:
                burn(self.burn_s)
            self._stop()
        elif self.stop and not self.at_layer:
            self._stop()

    def at(self, layer: int) -> None:
        """As layer ``layer`` (from 1) begins: its share of the burn, then the stop if it is here."""
        if self.burn_s and self.layers:
            burn(self.burn_s / self.layers)
        if self.stop and layer == self.at_layer:
            self._stop()

    def _stop(self) -> None:
        if self.stop is not None:
            self.stop()
