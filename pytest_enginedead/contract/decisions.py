"""What a process was found doing, and what the guard did about it: values every side reads.

The verdict (``SLOW``, ``HUNG``, ``DEAD``) is written by the guard inside
``VLLM::EngineCore``, by the harness's judge and by the probe, and read back from
files, the xdist wire and JSON reports.  Each value is defined here once, written as
its name, and read back through ``parse`` — which refuses anything else — so no code
compares the words themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

#: Busy means at least this share of one core over the window (5 %): the harness's
#: verdict, the guard inside vLLM and the exec probe all judge with it.
BUSY_CORES = 0.05

#: How often the harness samples an engine's processes, and over what window it
#: measures their CPU use (the options' defaults).
DEFAULT_INTERVAL_S = 0.1
DEFAULT_WINDOW_S = 1.0


def busy(cores: float, span_s: float = DEFAULT_WINDOW_S, threshold: float = BUSY_CORES) -> bool:
    """Whether CPU use of ``cores`` (1.0 = one core flat out), measured over ``span_s`` seconds,
    counts as computing: ``threshold`` of a core over a whole window (``DEFAULT_WINDOW_S``).

    The kernel counts a process's CPU time in clock ticks of 10 ms.  A process that sleeps
    still wakes now and then (a library's polling thread, our own deadline sampler) and is
    charged a tick or two: over a quarter of a second that reads as 4-8 % of a core, over a
    second as 1-2 %.  So a span shorter than a window must hold the CPU time a whole window
    would (``threshold × DEFAULT_WINDOW_S``): a worker that computes shows it in a quarter of a
    second, a sleeper's stray ticks never add up to it.
    """
    return cores * span_s >= threshold * max(span_s, DEFAULT_WINDOW_S)


class Verdict(str, enum.Enum):
    """What an engine process was doing when the engine was declared dead.

    A ``str`` whose value is its name, as every report and file writes it: code that
    compared a guard event's verdict with ``"SLOW"`` still does.
    """

    SLOW = "SLOW"  # alive and computing: declaring it dead is a false death
    HUNG = "HUNG"  # alive, not computing
    DEAD = "DEAD"  # process gone or zombie

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, value: object) -> Verdict:
        """A verdict from its written form (its name), or ``ValueError``."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value in cls.__members__:
            return cls[value]
        raise ValueError(f"not a verdict: {value!r} (one of {', '.join(cls.__members__)})")

    @classmethod
    def read(cls, value: object) -> Verdict | None:
        """A verdict where one may be absent (``None``): a test that saw no death."""
        return None if value is None else cls.parse(value)

    @property
    def false_death(self) -> bool:
        """Declaring an engine dead while this was so kills a worker that computes."""
        return self is Verdict.SLOW


def overall(verdicts: Iterable[Verdict]) -> Verdict:
    """Several processes: a gone one is a genuine death; else any computing is SLOW."""
    found = set(verdicts)
    for v in (Verdict.DEAD, Verdict.SLOW):
        if v in found:
            return v
    return Verdict.HUNG


class GuardAction(str, enum.Enum):
    """What the guard did at one decision (its ``GuardEvent``)."""

    #: the worker computes past vLLM's deadline: the wait goes on, up to the cap
    WAIT = "wait"
    #: the worker sat idle at vLLM's deadline: the wait ends if it stays idle hang_s
    WARN = "warn"
    #: the worker sat idle hang_s: the guard ended the wait (the engine dies of it)
    END = "end"
    #: the step outlived the guard's hard cap: the engine dies as stock vLLM would
    CAP = "cap"
    #: a worker is gone: left to vLLM's own worker monitor
    MONITOR = "monitor"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: object) -> GuardAction:
        """An action from its written form (its value), or ``ValueError``."""
        if isinstance(value, cls):
            return value
        for action in cls:
            if value == action.value:
                return action
        raise ValueError(f"not a guard action: {value!r} (one of {', '.join(a.value for a in cls)})")

    @property
    def ends(self) -> bool:
        """The engine dies of this decision."""
        return self in (GuardAction.END, GuardAction.CAP)

    @property
    def tally_word(self) -> str:
        """How a tally of decisions says it: ``2 SLOW (waited), 1 HUNG (ended)``."""
        return _TALLY[self]



@dataclass(frozen=True)
class Decision:
    """One kind of the guard's decisions: what it did and what it found (``wait SLOW``)."""

    action: GuardAction
    verdict: Verdict

    def __str__(self) -> str:
        return f"{self.action.value} {self.verdict.name}"


_TALLY = {
    GuardAction.WAIT: "waited",
    GuardAction.WARN: "warned",
    GuardAction.END: "ended",
    GuardAction.CAP: "cap",
    GuardAction.MONITOR: "left to vLLM",
}
