"""The step record and the control file: the format the worker writes and the harness reads.

``contract/`` is shared by both sides; these tests check the reader on hand-written
lines, and (``test_worker.py``) that what the real writer writes reads back exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_enginedead.contract import control
from pytest_enginedead.contract.control import (
    CONTROL_FILE,
    CONTROL_STAMP_FILE,
    Control,
    ControlReader,
    Injection,
    control_path,
    write_control,
)
from pytest_enginedead.contract.dumps import stack_path
from pytest_enginedead.contract.guardfiles import GUARD_EVENTS_FILE, GuardEvent, read_guard_events
from pytest_enginedead.contract.steps import (
    StepStats,
    StepTime,
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


# --- faults and the control file -------------------------------------------------------


def test_injection_describe_and_active() -> None:
    assert not Injection().active and Injection().describe() == "none"
    both = Injection(slow_s_per_seq=0.05, hang_at_step=3, crash_at_step=4)
    assert both.active and both.describe() == "busy 0.05 s/seq, hang at step 3, crash at step 4"
    assert Injection.from_dict({"crash_at_step": 2}) == Injection(crash_at_step=2)
    with pytest.raises(TypeError):
        Injection.from_dict({"slow": 1.0})


@pytest.mark.parametrize(
    "control",
    [
        Control(),
        Control(3, 2.0, Injection(slow_s_per_seq=0.05)),
        Control(7, None, Injection(hang_at_step=2, crash_at_step=5)),
    ],
)
def test_control_round_trips_through_json(control: Control) -> None:
    text = control.to_json()
    assert Control.from_json(text) == control
    assert json.loads(text)["epoch"] == control.epoch  # plain JSON, readable by anyone


def test_control_from_partial_json() -> None:
    assert Control.from_json("{}") == Control()
    assert Control.from_json('{"epoch": "4", "deadline_s": 2}') == Control(4, 2.0, Injection())


def test_control_reader_sees_each_write(tmp_path: Path) -> None:
    run_dir = str(tmp_path)
    reader = ControlReader(run_dir)
    assert reader.get() == Control()  # nothing written yet: vLLM's own deadline
    first = Control(1, 2.0, Injection(crash_at_step=2))
    write_control(run_dir, first)
    assert reader.get() == first
    second = Control(2, 1240.0)
    write_control(run_dir, second)
    assert reader.get() == second
    # written in place: no temp file left
    assert sorted(os.listdir(run_dir)) == [CONTROL_FILE, CONTROL_STAMP_FILE]


def test_control_reader_makes_no_syscall_until_the_control_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once per RPC in the engine core: between the harness's writes a call only compares the
    mapped stamp (a ``stat`` there cost ~125 µs on average); a write, even of the same epoch,
    is seen at the next call."""
    run_dir = str(tmp_path)
    write_control(run_dir, Control(1, 2.0))
    reader = ControlReader(run_dir)
    assert reader.get() == Control(1, 2.0)
    stats: list[str] = []
    real_stat = os.stat

    def counted(path: str, *args: object, **kwargs: object) -> os.stat_result:
        stats.append(path)
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(control.os, "stat", counted)
    for _ in range(100):
        assert reader.get() == Control(1, 2.0)
    assert stats == []
    write_control(run_dir, Control(1, 5.0))  # the same epoch, a new control
    assert reader.get() == Control(1, 5.0)
    assert len(stats) == 1
    assert reader.get() == Control(1, 5.0) and len(stats) == 1


def test_control_reader_without_a_stamp_reads_on_every_call(tmp_path: Path) -> None:
    """A control file without its stamp (written by an older harness): every call looks."""
    run_dir = str(tmp_path)
    reader = ControlReader(run_dir)
    Path(control_path(run_dir)).write_text(Control(1, 2.0).to_json())
    assert reader.get() == Control(1, 2.0)
    Path(run_dir, "new").write_text(Control(2, 3.0).to_json())
    os.replace(Path(run_dir, "new"), control_path(run_dir))
    assert reader.get() == Control(2, 3.0)


def test_control_reader_keeps_the_last_good_control(tmp_path: Path) -> None:
    run_dir = str(tmp_path)
    reader = ControlReader(run_dir)
    good = Control(1, 30.0)
    write_control(run_dir, good)
    assert reader.get() == good
    Path(control_path(run_dir)).write_text('{"epoch": 2, "deadline_s": ')  # torn
    assert reader.get() == good


def test_guard_events_round_trip(tmp_path: Path) -> None:
    event = GuardEvent("execute_model", 5, 64, 2.0, 2.0, 1240.0, "SLOW", "waiting up to 1240 s", 99, 12.5)
    path = tmp_path / GUARD_EVENTS_FILE
    assert read_guard_events(str(path)) == []
    path.write_text(event.to_line() + "not json\n" + '{"method": "x"}\n' + event.to_line())
    assert read_guard_events(str(path)) == [event, event]
