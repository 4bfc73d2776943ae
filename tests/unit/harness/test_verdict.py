"""The pieces of the verdict's message: the steps so far, summarized."""

from __future__ import annotations

import time

from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.harness.verdict import step_summary


def test_step_summary() -> None:
    t = time.monotonic()
    assert step_summary([]) == "no step had finished"
    assert step_summary([StepTime(1, 8, t, None, 1)]) == "no step had finished"
    steps = [
        StepTime(1, 8, t, 0.5, 1),
        StepTime(2, 64, t, 2.0, 1),
        StepTime(3, 8, t, 0.25, 1),
        StepTime(4, 64, t, None, 1),  # running: not counted
    ]
    assert step_summary(steps) == "3 finished so far, p50 0.500 s, max 2.000 s at batch 64"
