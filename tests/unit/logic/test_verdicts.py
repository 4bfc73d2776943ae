"""The verdicts on an engine process and how busy counts as busy: pure."""

from __future__ import annotations

import pytest

from pytest_enginedead import Verdict
from pytest_enginedead.logic.verdicts import DEFAULT_BUSY_THRESHOLD, overall


def test_default_threshold_is_five_percent() -> None:
    """The documented default: 5 % of one core."""
    assert DEFAULT_BUSY_THRESHOLD == 0.05


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
