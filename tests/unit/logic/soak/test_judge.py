"""The soak's judgement of the guard, on plain records: each side of every detector."""

from __future__ import annotations

from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.contract.guardfiles import GuardEvent
from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.logic.soak.judge import (
    Cause,
    Exit,
    Limits,
    Outcome,
    Request,
    Window,
    judge,
)

GUARDED = Limits(deadline_s=2.0, hang_s=5.0, guarded=True)
STOCK = Limits(deadline_s=2.0, hang_s=5.0, guarded=False)


def event(t: float, action: GuardAction, verdict: Verdict, step: int = 7) -> GuardEvent:
    # the outcome's words say the opposite of the action: the judge must never read them
    return GuardEvent("execute_model", step, 8, 2.1, 2.0, 700.0, verdict, action, "ending the wait",
                      1234, t)


def step(started: float, seconds: float | None, i: int = 1, pid: int = 1234) -> StepTime:
    return StepTime(i, 8, started, seconds, pid)


def slow_window() -> Window:
    return Window("slow", "faults[0] slow", 100.0, 120.0, 0)


def test_a_slow_window_waited_on_is_no_false_end_and_the_warning_words_are_not_read() -> None:
    steps = [step(101.0, 3.0, 1), step(104.0, 3.0, 2), step(107.0, 3.0, 3)]
    events = [event(103.0, GuardAction.WAIT, Verdict.SLOW), event(106.0, GuardAction.WAIT, Verdict.SLOW)]
    j = judge([slow_window()], events, steps, [], [], GUARDED, 0.0, 200.0)
    assert j.false_ends == 0
    assert j.windows[0].ok and j.windows[0].steps_past_deadline == 3


def test_the_decisions_are_tallied_by_action_and_written_by_its_value() -> None:
    steps = [step(101.0, 3.0, 1), step(104.0, 3.0, 2)]
    events = [event(103.0, GuardAction.WAIT, Verdict.SLOW), event(106.0, GuardAction.WAIT, Verdict.SLOW)]
    j = judge([slow_window()], events, steps, [], [], GUARDED, 0.0, 200.0)
    assert j.decisions == {GuardAction.WAIT: 2} and j.windows[0].decisions == {GuardAction.WAIT: 2}
    assert j.windows[0].to_dict(0.0)["decisions"] == {"wait": 2}


def test_a_slow_window_the_guard_ended_is_a_false_end() -> None:
    steps = [step(101.0, None)]
    events = [event(103.0, GuardAction.WAIT, Verdict.SLOW), event(108.0, GuardAction.END, Verdict.HUNG)]
    j = judge([slow_window()], events, steps, [], [], GUARDED, 0.0, 200.0)
    assert j.false_ends == 1
    assert "FALSE END" in j.windows[0].why


def test_steps_past_the_deadline_with_no_wait_decision_are_a_miss_counted_as_a_false_end() -> None:
    j = judge([slow_window()], [], [step(101.0, 3.0)], [], [], GUARDED, 0.0, 200.0)
    assert j.false_ends == 1
    assert "MISSED" in j.windows[0].why
    # a step past the deadline by less than two of the guard's looks may go unseen: no miss
    j = judge([slow_window()], [], [step(101.0, 2.3)], [], [], GUARDED, 0.0, 200.0)
    assert j.false_ends == 0


def test_an_end_outside_every_window_is_a_false_end_too() -> None:
    j = judge([slow_window()], [event(150.0, GuardAction.CAP, Verdict.SLOW)], [], [], [], GUARDED, 0.0, 200.0)
    assert j.false_ends == 1 and j.stray_ends == 1


def hang_window() -> Window:
    return Window("hang", "faults[1] hang", 100.0, 112.0, 0)


def test_a_hang_ended_within_hang_s_and_two_looks_is_caught() -> None:
    hung = step(100.2, None, 40)
    j = judge([hang_window()], [event(105.4, GuardAction.END, Verdict.HUNG)], [hung],
              [Exit(0, 108.0, 71, False)], [], GUARDED, 0.0, 200.0)
    assert j.missed_hangs == 0 and j.false_ends == 0
    assert j.windows[0].ended_after_s is not None and abs(j.windows[0].ended_after_s - 5.2) < 1e-9


def test_a_hang_ended_late_or_never_is_a_missed_hang() -> None:
    hung = step(100.2, None, 40)
    late = judge([hang_window()], [event(107.0, GuardAction.END, Verdict.HUNG)], [hung], [], [],
                 GUARDED, 0.0, 200.0)
    assert late.missed_hangs == 1 and "later than" in late.windows[0].why
    never = judge([hang_window()], [event(102.1, GuardAction.WARN, Verdict.HUNG)], [hung], [], [],
                  GUARDED, 0.0, 200.0)
    assert never.missed_hangs == 1
    # at two ranks the peers compute their part of the step first: one healthy step more
    tp2 = Limits(2.0, 5.0, True, ranks=2, healthy_step_s=2.0)
    assert judge([hang_window()], [event(107.0, GuardAction.END, Verdict.HUNG)], [hung], [], [],
                 tp2, 0.0, 200.0).missed_hangs == 0
    assert judge([hang_window()], [event(110.0, GuardAction.END, Verdict.HUNG)], [hung], [], [],
                 tp2, 0.0, 200.0).missed_hangs == 1  # past 5 + 0.5 + 2 x 2 s


def test_a_hang_is_timed_from_its_last_layer_up_to_one_healthy_step_after_the_steps_start() -> None:
    """The fault stops a step in its middle layer, after the layers before it ran (on a model of
    1 s steps, up to 1 s); the guard's clock runs from that last layer: hang_s + two looks + one
    healthy step from the step's start holds, a look past it is missed."""
    hung = step(100.2, None, 40)
    one_s_steps = Limits(2.0, 5.0, True, healthy_step_s=1.0)
    within = judge([hang_window()], [event(106.7, GuardAction.END, Verdict.HUNG)], [hung], [], [],
                   one_s_steps, 0.0, 200.0)
    assert within.missed_hangs == 0, within.windows[0].why
    late = judge([hang_window()], [event(106.9, GuardAction.END, Verdict.HUNG)], [hung], [], [],
                 one_s_steps, 0.0, 200.0)
    assert late.missed_hangs == 1 and "later than" in late.windows[0].why


def test_a_spin_is_judged_as_a_hang_its_death_is_genuine_and_one_the_guard_waited_on_is_missed() -> None:
    """A worker spinning at a whole core without advancing: the guard must end it after hang_s like a
    hang (the CPU rule alone waited on it up to the cap, as if it computed)."""
    spin = Window("spin", "faults[2] spin", 100.0, 112.0, 0)
    stuck = step(100.2, None, 40)
    ended = judge([spin], [event(105.4, GuardAction.END, Verdict.HUNG)], [stuck],
                  [Exit(0, 108.0, 71, False)], [], GUARDED, 0.0, 200.0)
    assert ended.missed_hangs == 0 and ended.false_ends == 0 and ended.windows[0].ok
    assert [d.cause for d in ended.deaths] == [Cause.GENUINE]
    waited = judge([spin], [event(102.1, GuardAction.WAIT, Verdict.SLOW)], [stuck], [], [],
                   GUARDED, 0.0, 200.0)
    assert waited.missed_hangs == 1 and waited.false_ends == 0


def test_a_kill_is_left_to_vllms_monitor_and_an_end_there_is_a_false_end() -> None:
    kill = Window("kill", "faults[2] kill", 100.0, 104.0, 0)
    exits = [Exit(0, 103.0, 70, False)]
    ok = judge([kill], [event(100.7, GuardAction.MONITOR, Verdict.DEAD)], [], exits, [], GUARDED, 0.0, 200.0)
    assert ok.false_ends == 0 and ok.windows[0].ok
    bad = judge([kill], [event(100.7, GuardAction.END, Verdict.HUNG)], [], exits, [], GUARDED, 0.0, 200.0)
    assert bad.false_ends == 1


def test_requests_lost_are_charged_to_the_death_that_cost_them() -> None:
    """Stock vLLM dies in a slow window: the failures from the window's start until the restarted
    server answered are lost to a false death; the kill's are lost to a genuine one; a request cut
    by the soak's stop or closed on purpose is neither."""
    slow = Window("slow", "faults[0] slow", 100.0, 103.0, 0)
    kill = Window("kill", "faults[1] kill", 200.0, 203.0, 1)
    exits = [Exit(0, 102.5, 0, False, back_at=130.0), Exit(1, 202.0, 0, False, back_at=230.0)]
    requests = [
        Request.failing("steady", 99.0, 102.4, "HTTP 500 InternalServerError"),
        Request.failing("steady", 110.0, 110.1, "APIConnectionError"),
        Request("steady", 140.0, 141.0, Outcome.OK),
        Request.failing("steady", 201.0, 202.1, "APIConnectionError"),
        Request("disconnect", 140.0, 140.5, Outcome.DISCONNECTED),
        Request("steady", 250.0, 251.0, Outcome.CUT),
        Request.failing("steady", 160.0, 160.1, "HTTP 400 BadRequestError"),
    ]
    j = judge([slow, kill], [], [], exits, requests, STOCK, 0.0, 260.0)
    assert j.lost_to_false_death == 2
    assert j.lost_to_genuine_death == 1
    assert [d.cause for d in j.deaths] == [Cause.FALSE, Cause.GENUINE]
    assert j.failures["HTTP 400 BadRequestError"] == 1 and Outcome.CUT.value not in j.failures
    assert j.false_ends == 0 and j.missed_hangs is None  # no guard: nothing of the guard's to judge
    assert not j.windows[0].ok  # stock died in its slow window


def test_a_death_belongs_to_the_last_window_before_it_not_to_an_earlier_one_still_in_its_grace() -> None:
    """A burst that closed 5 s before a kill was delivered did not kill the server: the kill did."""
    burst = Window("burst", "faults[3] burst", 100.0, 104.0, 0)
    kill = Window("kill", "faults[4] kill", 109.0, 110.5, 0)
    j = judge([burst, kill], [], [], [Exit(0, 110.0, 70, False)], [], GUARDED, 0.0, 200.0)
    assert [r.ok for r in j.windows] == [True, True]
    assert j.false_ends == 0 and [d.cause for d in j.deaths] == [Cause.GENUINE]
    # with no kill in force, the same death is the burst's: a false death
    alone = judge([burst], [], [], [Exit(0, 110.0, 70, False)], [], GUARDED, 0.0, 200.0)
    assert not alone.windows[0].ok and alone.false_ends == 1 and alone.deaths[0].cause is Cause.FALSE
