"""Counts as a person writes them: ``1 step``, ``2 steps`` (never ``1 steps`` or ``step(s)``)."""

from __future__ import annotations

from pytest_enginedead.logic.reporting.checkevents import RunDone
from pytest_enginedead.logic.reporting.checking import CheckMode, RunResult
from pytest_enginedead.logic.words import plural


def test_plural_says_one_and_many() -> None:
    assert plural(1, "step") == "1 step"
    assert plural(0, "step") == "0 steps"
    assert plural(2, "false death") == "2 false deaths"
    assert plural(3, "engine configuration") == "3 engine configurations"
    assert plural(1, "child", "children") == "1 child" and plural(2, "child", "children") == "2 children"


def test_a_run_of_one_step_says_one_step() -> None:
    line = RunDone(8, CheckMode.STOCK, RunResult.OK, 1, 0.5, 0.6, 20).line()
    assert "(1 step, longest 0.50 s)" in line
