"""The verdicts on an engine process (``SLOW``, ``HUNG``, ``DEAD``) and how busy counts as busy.

One process's evidence becomes a verdict in ``harness.liveness.classify``; several
processes' verdicts become the engine's in ``overall``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

#: Busy means at least this share of one core over the window (5 %).
DEFAULT_BUSY_THRESHOLD = 0.05

DEFAULT_INTERVAL_S = 0.1

DEFAULT_WINDOW_S = 1.0


@dataclass(frozen=True)
class LivenessSettings:
    """How busy counts as busy, and how often to look."""

    threshold: float = DEFAULT_BUSY_THRESHOLD
    interval_s: float = DEFAULT_INTERVAL_S
    window_s: float = DEFAULT_WINDOW_S


class Verdict(enum.Enum):
    """What an engine process was doing when the engine was declared dead."""

    SLOW = "slow"  # alive and computing: declaring it dead is a false death
    HUNG = "hung"  # alive, not computing
    DEAD = "dead"  # process gone or zombie

    def __str__(self) -> str:
        return self.name


def overall(verdicts: Iterable[Verdict]) -> Verdict:
    """Several processes: a gone one is a genuine death; else any computing is SLOW."""
    found = set(verdicts)
    for v in (Verdict.DEAD, Verdict.SLOW):
        if v in found:
            return v
    return Verdict.HUNG
