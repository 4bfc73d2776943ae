"""A soak run's record: which requests count (the soak's own stop cut some), the exits it caused
apart from the others, the median step (``harness.load.soak``; no server: the pieces by hand)."""

from __future__ import annotations

from collections import Counter

from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.harness.load.soak import exit_codes, requests_record, step_p50_ms
from pytest_enginedead.logic.soak.judge import Exit, Judgement, Outcome, Request


def test_requests_cut_by_the_stop_are_not_counted_as_sent() -> None:
    requests = [Request("chat", 1, 2, Outcome.OK), Request.failing("chat", 3, 5, "500"),
                Request("long", 1, 2, Outcome.CUT), Request("long", 5, 6, Outcome.DISCONNECTED)]
    judged = Judgement([], 0, None, 0, 0, Counter({"500": 1}), [], Counter(), 0)
    assert requests_record(requests, judged) == {
        "sent": 3, "completed": 2, "failed": 1, "causes": {"500": 1},
        "by_kind": {"chat": {"sent": 2, "failed": 1}, "long": {"sent": 1, "failed": 0}}, "cut_at_stop": 1,
    }


def test_the_exits_the_soak_caused_are_kept_apart() -> None:
    exits = [Exit(0, 40.0, -9, False, 45.0), Exit(1, 60.0, 0, True), Exit(2, 70.0, None, False)]
    assert exit_codes(exits, by_us=False) == [-9, None]
    assert exit_codes(exits, by_us=True) == [0]


def test_the_median_step_counts_finished_steps_only() -> None:
    steps = [StepTime(1, 4, 10.0, 0.2, 7), StepTime(2, 4, 11.0, None, 7), StepTime(1, 4, 10.0, 0.3, 8)]
    assert step_p50_ms(steps) == 250.0
    assert step_p50_ms(steps[1:2]) is None
