"""The verdicts on an engine process and how busy counts as busy: pure."""

from __future__ import annotations

import pytest

from pytest_enginedead import Verdict
from pytest_enginedead.contract.decisions import BUSY_CORES, GuardAction, busy, overall
from pytest_enginedead.contract.guardfiles import GuardEvent
from pytest_enginedead.logic.reporting.report import guard_tally


def test_default_threshold_is_five_percent() -> None:
    """The documented default: 5 % of one core."""
    assert BUSY_CORES == 0.05


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([Verdict.HUNG, Verdict.SLOW, Verdict.DEAD], Verdict.DEAD),
        ([Verdict.SLOW, Verdict.DEAD], Verdict.DEAD),
        ([Verdict.HUNG, Verdict.SLOW], Verdict.SLOW),
        ([Verdict.SLOW], Verdict.SLOW),
        ([Verdict.HUNG, Verdict.HUNG], Verdict.HUNG),
        ([], Verdict.HUNG),
    ],
)
def test_overall_precedence(verdicts: list[Verdict], expected: Verdict) -> None:
    """Several processes: any gone → DEAD; else any computing → SLOW; else HUNG."""
    assert overall(verdicts) is expected
    assert overall(iter(verdicts)) is expected  # any iterable, consumed once


def test_verdict_names() -> None:
    """The three verdicts print as their names (used in reports)."""
    assert [str(v) for v in Verdict] == ["SLOW", "HUNG", "DEAD"]


def test_a_verdict_is_read_from_its_name_and_nothing_else() -> None:
    """Reports, wires and files hold the name; anything else is refused, not guessed."""
    assert [Verdict.parse(v.name) for v in Verdict] == list(Verdict)
    assert Verdict.read(None) is None and Verdict.parse(Verdict.HUNG) is Verdict.HUNG
    for junk in ("slow", "Slow", "", "CAP", 1, None):
        with pytest.raises(ValueError, match="not a verdict"):
            Verdict.parse(junk)
    assert [v.false_death for v in Verdict] == [True, False, False]


def test_a_guard_action_round_trips_and_says_whether_the_engine_dies_of_it() -> None:
    assert [GuardAction.parse(a.value) for a in GuardAction] == list(GuardAction)
    assert {a for a in GuardAction if a.ends} == {GuardAction.END, GuardAction.CAP}
    with pytest.raises(ValueError, match="not a guard action"):
        GuardAction.parse("ending the wait")


def test_the_tally_counts_each_decision_by_its_action_not_its_words() -> None:
    """The guard's warning at the deadline ("ending the wait if it stays idle N s more") is a
    warning: the wait goes on.  Read by its words it was counted as an ended wait."""
    def event(verdict: Verdict, action: GuardAction, outcome: str) -> dict[str, object]:
        return GuardEvent("execute_model", 3, 8, 2.0, 2.0, 600.0, verdict, action, outcome, 7, 1.0).to_dict()

    events = [
        event(Verdict.SLOW, GuardAction.WAIT, "waiting up to 600 s"),
        event(Verdict.HUNG, GuardAction.WARN, "ending the wait if it stays idle 8 s more"),
        event(Verdict.HUNG, GuardAction.END, "ending the wait"),
        event(Verdict.SLOW, GuardAction.CAP, "past the cap: the engine dies as stock vLLM would"),
    ]
    assert guard_tally(events) == "1 SLOW (waited), 1 HUNG (warned), 1 HUNG (ended), 1 SLOW (cap)"


@pytest.mark.parametrize(
    ("cores", "expected"), [(0.0, False), (0.049, False), (BUSY_CORES, True), (1.0, True)]
)
def test_busy_is_at_least_the_one_threshold(cores: float, expected: bool) -> None:
    assert busy(cores) is expected


@pytest.mark.parametrize(
    ("cpu_s", "span_s", "expected"),
    [
        (0.02, 0.25, False),  # two ticks in a quarter second: 8 % of a core there, a sleeper's strays
        (0.25, 0.25, True),  # a quarter second flat out shows at once
        (0.04, 1.0, False),
        (0.05, 1.0, True),
        (0.09, 2.0, False),  # a longer span: its own share
        (0.10, 2.0, True),
    ],
)
def test_a_span_shorter_than_a_window_must_hold_a_whole_windows_cpu(
    cpu_s: float, span_s: float, expected: bool
) -> None:
    assert busy(cpu_s / span_s, span_s) is expected
