"""The control file: the deadline and faults the harness tells the code inside vLLM, per test."""

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


def test_faults_name_their_ranks_and_travel_through_the_control_file(tmp_path: Path) -> None:
    """``ranks`` survives the control file's JSON (a list there, a tuple here); None is every rank."""
    from pytest_enginedead.contract.control import ControlReader

    run_dir = str(tmp_path)
    faults = Injection(hang_at_step=2, ranks=(1,))
    write_control(run_dir, Control(1, 2.0, faults))
    read = ControlReader(run_dir).get().injection
    assert read == faults and read.applies_to(1) and not read.applies_to(0)
    assert Injection(hang_at_step=2).applies_to(7)
    assert faults.describe() == "hang at step 2, on rank 1"
