"""A worker's step record written by hand, in the worker's format: rows are then computed
exactly as after a real run."""

from __future__ import annotations

from typing import Any

from pytest_enginedead.contract.decisions import Verdict
from pytest_enginedead.contract.steps import BEGIN_LINE, END_LINE, steps_path
from pytest_enginedead.harness.engines.offline import Engine
from pytest_enginedead.harness.judging.liveness import LivenessSettings
from pytest_enginedead.harness.judging.verdict import Finding
from pytest_enginedead.process.pinned import ProcRef

#: a process id for the record's file name; creation time 0 matches no real process
WORKER = ProcRef(4242, 0.0)


def write_steps(engine: Engine, *steps: tuple[int, int, float, float | None]) -> None:
    """Append (step, batch, start, seconds or None) to the worker's record, as it writes them."""
    with open(steps_path(engine.run_dir, WORKER.pid), "ab") as f:
        for step, batch, start, seconds in steps:
            f.write(BEGIN_LINE % (step, batch, start))
            if seconds is not None:
                f.write(END_LINE % (step, start + seconds))


def finding(verdict: Verdict, error: str = "EngineDeadError") -> Finding:
    """A verdict as the judge gives it, with no process evidence behind it."""
    return Finding(verdict, error, 2.0, {}, LivenessSettings())


def deaths_written(verdict: str | None) -> list[dict[str, Any]]:
    """A test row's deaths as the report file holds them: the one death ``verdict`` names, or none."""
    return [] if verdict is None else [finding(Verdict.parse(verdict)).to_dict()]
