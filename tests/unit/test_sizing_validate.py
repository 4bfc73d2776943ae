"""``bench/sizing.py validate`` reading what was recorded: which steps the fit takes, which it checks."""

from __future__ import annotations

from typing import Any

from bench import sizing_validate


def _rows(seqs: int, seconds: float) -> list[list[Any]]:
    return [[seqs, seqs, seqs, seqs, seqs, seqs, seconds]]


def test_a_batch_the_fit_measures_now_is_fitted_from_a_record_that_held_it_out() -> None:
    """A record made while batch 2 was held out: its batch 2 is what the fit now measures, so the fit takes
    it and no check is made on it; batch 4 stays held out."""
    engine = {"runs": {"decode batch 1": _rows(1, 0.2), "held out: decode batch 2": _rows(2, 0.3),
                       "held out: decode batch 4": _rows(4, 0.4)}}
    assert 2 in sizing_validate.FIT_BATCHES and 4 not in sizing_validate.FIT_BATCHES
    assert [s.seqs for s, _ in sizing_validate._fitted(engine, 1)] == [1, 2]
    assert [[s.seqs for s, _ in run] for run in sizing_validate._held(engine, 1)] == [[4]]
