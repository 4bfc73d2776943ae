"""The step record: the format the worker writes and the harness reads.

``contract/`` is shared by both sides; these tests check the reader on hand-written
lines, and (``unit/vllm_plugin/test_worker.py``) that what the real writer writes reads back exactly.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from pytest_enginedead.contract.dumps import stack_path
from pytest_enginedead.contract.steps import (
    StepStats,
    StepTime,
    attended_keys,
    one_per_step,
    parse_steps,
    read_steps,
    steps_path,
    summarize,
    worst_by_batch,
)

PID = 4242


def lines(*records: dict[str, object]) -> list[str]:
    return [json.dumps(r) + "\n" for r in records]


def begin(step: int, batch: int, t: float) -> dict[str, object]:
    return {"e": "b", "i": step, "n": batch, "t": t}


def phase(event: str, step: int, t: float) -> dict[str, object]:
    return {"e": event, "i": step, "t": t}


# --- parse_steps ---------------------------------------------------------------------------


def test_a_step_is_execute_plus_sample() -> None:
    steps = parse_steps(
        lines(begin(1, 8, 10.0), phase("e", 1, 10.5), phase("sb", 1, 10.75), phase("se", 1, 11.0)), PID
    )
    assert steps == [StepTime(1, 8, 10.0, 0.75, PID)]
    assert not steps[0].running


def test_a_step_without_sampling_is_its_execute_phase() -> None:
    [step] = parse_steps(lines(begin(3, 64, 5.0), phase("e", 3, 7.25)), PID)
    assert step.seconds == pytest.approx(2.25) and step.batch_size == 64 and step.step == 3


@pytest.mark.parametrize(
    "records",
    [
        [begin(1, 8, 1.0)],  # execute_model still running
        [begin(1, 8, 1.0), phase("e", 1, 2.0), phase("sb", 1, 2.1)],  # sampling still running
    ],
)
def test_a_step_is_running_while_either_phase_is(records: list[dict[str, object]]) -> None:
    [step] = parse_steps(lines(*records), PID)
    assert step.running and step.seconds is None and step.started == 1.0


def test_steps_come_sorted_by_index_with_their_own_batch() -> None:
    steps = parse_steps(
        lines(begin(2, 4, 3.0), phase("e", 2, 3.5), begin(1, 8, 1.0), phase("e", 1, 2.0), begin(3, 2, 4.0)),
        PID,
    )
    assert [(s.step, s.batch_size, s.seconds) for s in steps] == [(1, 8, 1.0), (2, 4, 0.5), (3, 2, None)]
    assert {s.pid for s in steps} == {PID}


def test_torn_and_foreign_lines_are_skipped() -> None:
    text = [
        *lines(begin(1, 8, 1.0), phase("e", 1, 1.5)),
        "not json\n",
        '{"e": "b", "i": 2}\n',  # no time
        '{"e": "b", "i": "x", "t": 1}\n',  # no step number
        *lines(phase("e", 7, 9.0)),  # the end of a step whose begin was never seen
        '{"e":"b","i":3,"n":8,"t":2.0',  # the last line, half written
    ]
    assert parse_steps(text, PID) == [StepTime(1, 8, 1.0, 0.5, PID)]


def test_read_steps_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "steps-1.jsonl"
    assert read_steps(str(path), 1) == []  # no record yet
    path.write_text("".join(lines(begin(1, 2, 0.0), phase("e", 1, 0.25))))
    assert read_steps(str(path), 1) == [StepTime(1, 2, 0.0, 0.25, 1)]


def test_paths_are_per_process(tmp_path: Path) -> None:
    assert steps_path(str(tmp_path), 12) == str(tmp_path / "steps-12.jsonl")
    assert stack_path(str(tmp_path), 12) == str(tmp_path / "stack-12.txt")


# --- summarize and worst_by_batch ------------------------------------------------------------


def done(step: int, batch: int, seconds: float, started: float = 0.0) -> StepTime:
    return StepTime(step, batch, started, seconds, PID)


def test_summarize_finished_steps() -> None:
    stats = summarize([done(1, 8, 0.5), done(2, 8, 0.25), done(3, 64, 2.0), done(4, 8, 1.0)])
    assert stats == StepStats(steps=4, p50_s=0.75, max_s=2.0, max_running=False, max_batch=64)


def test_summarize_nothing() -> None:
    assert summarize([]) == StepStats(0, None, None, False, 0)


def test_a_running_step_counts_only_with_now_and_only_when_longest() -> None:
    steps = [done(1, 8, 0.5), StepTime(2, 64, 100.0, None, PID)]
    plain = summarize(steps)
    assert plain == StepStats(steps=1, p50_s=0.5, max_s=0.5, max_running=False, max_batch=64)
    cut = summarize(steps, now=103.0)  # the running step has run 3 s, longer than any
    assert cut.max_s == pytest.approx(3.0) and cut.max_running and cut.steps == 1 and cut.p50_s == 0.5
    early = summarize(steps, now=100.25)  # shorter than the longest finished step
    assert early.max_s == 0.5 and not early.max_running
    only = summarize([StepTime(1, 4, 10.0, None, PID)], now=12.5)
    assert only == StepStats(steps=0, p50_s=None, max_s=2.5, max_running=True, max_batch=4)


def test_worst_by_batch_takes_the_longest_finished_step_per_batch() -> None:
    steps = [
        done(1, 8, 0.5), done(2, 8, 0.75), done(3, 64, 2.0), done(4, 8, 0.25), StepTime(5, 128, 0, None, PID),
    ]
    assert worst_by_batch(steps) == {8: 0.75, 64: 2.0}
    assert worst_by_batch([]) == {}


def test_attended_keys_is_the_sum_it_says() -> None:
    for first, last, window in itertools.product(range(1, 9), range(0, 12), (None, 1, 3, 5, 20)):
        want = sum(k if window is None else min(k, window) for k in range(first, last + 1))
        assert attended_keys(first, last, window) == want, (first, last, window)


def test_whole_lines_after_leaves_a_line_being_written_for_the_next_look(tmp_path: Path) -> None:
    from pytest_enginedead.contract.steps import whole_lines_after

    path = tmp_path / "steps"
    assert whole_lines_after(str(path), 0) == b""  # no record yet
    path.write_bytes(b"B 1\nE 1\nB 2")
    first = whole_lines_after(str(path), 0)
    assert first == b"B 1\nE 1\n"
    assert whole_lines_after(str(path), len(first)) == b""  # "B 2" is not whole yet
    path.write_bytes(b"B 1\nE 1\nB 2\n")
    assert whole_lines_after(str(path), len(first)) == b"B 2\n"


def test_each_rank_s_record_of_a_step_is_one_step_as_long_as_the_slowest() -> None:
    """Two ranks record every step (their own pids, the same step numbers and shapes): one record per
    step, at the slower rank's time.  A step the other rank did not record, a later step of one
    process that reuses a number, and a step still running stay records of their own."""
    records = [StepTime(5, 8, 1.0, 0.50, 11, 8, 100), StepTime(5, 8, 1.0, 0.52, 12, 8, 100),
               StepTime(6, 8, 2.0, 0.61, 12, 8, 108), StepTime(6, 8, 2.0, 0.60, 11, 8, 108),
               StepTime(7, 8, 3.0, 0.70, 11, 8, 116),
               StepTime(5, 8, 4.0, 0.40, 11, 8, 100),
               StepTime(8, 8, 5.0, None, 11, 8, 124), StepTime(8, 8, 5.0, None, 12, 8, 124)]
    found = one_per_step(records)
    assert [(s.step, s.seconds) for s in found] == [(5, 0.52), (6, 0.61), (7, 0.70), (5, 0.40), (8, None),
                                                    (8, None)]


def test_ranks_that_recorded_different_steps_under_one_number_are_two_steps() -> None:
    """The same number with another shape is another step, not another rank's view of it."""
    records = [StepTime(5, 8, 1.0, 0.50, 11, 8, 100), StepTime(5, 1, 1.0, 0.02, 12, 1, 3)]
    assert len(one_per_step(records)) == 2
