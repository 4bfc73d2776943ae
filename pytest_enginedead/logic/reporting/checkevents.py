"""What ``enginedead check`` hears while its regression run works: a run done, or a note.

The regression suite (``pytest_enginedead.regression``) writes one event a line to the file
``ENGINEDEAD_CHECK_PROGRESS`` names, through ``event_line``; the command follows the file and
reads each line back through ``read_event``, which refuses what it does not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..words import plural
from .checking import CheckMode, RunResult


@dataclass(frozen=True)
class RunDone:
    """One planned run ended: its batch, its mode, its result, its steps."""

    batch_size: int
    mode: CheckMode
    result: RunResult
    steps: int
    #: the longest step (None: none ended)
    step_max_s: float | None
    #: the test's own duration, and the time since the regression run began
    duration_s: float
    elapsed_s: float

    def line(self) -> str:
        """The run as the command reports it while it works."""
        steps = plural(self.steps, "step")
        if self.step_max_s is not None:
            steps += f", longest {self.step_max_s:.2f} s"
        return (
            f"  batch {self.batch_size:>4}  {self.mode.value:<6}  {self.result.value:<13} "
            f"{self.duration_s:5.1f} s ({steps})  [{self.elapsed_s:.0f} s]"
        )


@dataclass(frozen=True)
class Note:
    """A line on the way (an engine starting, still starting, ready)."""

    note: str
    elapsed_s: float

    def line(self) -> str:
        return f"  {self.note}  [{self.elapsed_s:.0f} s]"


Event = RunDone | Note


def event_line(event: Event) -> str:
    """The event as its file holds it: one JSON object and a newline."""
    if isinstance(event, Note):
        data: dict[str, Any] = {"note": event.note, "elapsed_s": event.elapsed_s}
    else:
        data = {"batch_size": event.batch_size, "mode": event.mode.value, "result": event.result.value,
                "steps": event.steps, "step_max_s": event.step_max_s, "duration_s": event.duration_s,
                "elapsed_s": event.elapsed_s}
    return json.dumps(data) + "\n"


def read_event(line: str) -> Event:
    """An event as ``event_line`` wrote it; ``ValueError`` (or ``KeyError``) for anything else."""
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError(f"not an event: {line!r}")
    if "note" in data:
        return Note(str(data["note"]), float(data["elapsed_s"]))
    max_s = data["step_max_s"]
    return RunDone(int(data["batch_size"]), CheckMode(data["mode"]), RunResult(data["result"]),
                   int(data["steps"]), None if max_s is None else float(max_s), float(data["duration_s"]),
                   float(data["elapsed_s"]))
