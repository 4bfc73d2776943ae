"""What the guard writes and the harness and the probe read: its start-up record, its state, its events."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.contract.guardfiles import (
    CORE_READY_FILE,
    GUARD_EVENTS_FILE,
    CoreReady,
    GuardEvent,
    core_ready_path,
    guard_state_path,
    guard_state_pid,
    read_core_ready,
    read_guard_events,
    read_guard_state,
    state_dir,
    write_core_ready,
    write_guard_state,
)
from pytest_enginedead.contract.names import ENV_DIR, STATE_DIR_ENV
from tests.support.guards import in_step


def test_core_ready_round_trip(tmp_path: Path) -> None:
    assert read_core_ready(str(tmp_path)) is None  # not written yet
    ready = CoreReady(12, False, True, "a:b", None, None, "why")
    write_core_ready(str(tmp_path), ready)
    assert read_core_ready(str(tmp_path)) == ready
    assert [p.name for p in tmp_path.iterdir()] == [CORE_READY_FILE]  # no temp file left
    Path(core_ready_path(str(tmp_path))).write_text('{"pid": 3, "guard": true}')  # 0.2.0's keys
    assert read_core_ready(str(tmp_path)) == CoreReady(3, True)
    Path(core_ready_path(str(tmp_path))).write_text("{not json")
    assert read_core_ready(str(tmp_path)) is None


# --- the guard's state file ------------------------------------------------------------


def test_guard_state_round_trips_and_names_its_core(tmp_path: Path) -> None:
    path = guard_state_path(str(tmp_path), 4242)
    assert guard_state_pid(os.path.basename(path)) == 4242
    assert guard_state_pid("enginedead-guard-x.json") is None
    assert read_guard_state(path) is None
    write_guard_state(path, in_step())
    assert read_guard_state(path) == in_step()
    Path(path).write_text("{not json")
    assert read_guard_state(path) is None


def test_a_guard_state_ended_only_by_an_action_that_ends_the_engine(tmp_path: Path) -> None:
    """``ended`` says the guard ended the engine's wait: END or CAP; a state that says the wait
    it let go on (or warned of) ended it is refused like any unreadable state."""
    path = guard_state_path(str(tmp_path), 4242)
    for action in (GuardAction.END, GuardAction.CAP):
        write_guard_state(path, in_step(ended=action))
        assert read_guard_state(path) == in_step(ended=action)
    for action in (GuardAction.WAIT, GuardAction.WARN, GuardAction.MONITOR):
        write_guard_state(path, in_step(ended=action))
        assert read_guard_state(path) is None


def test_state_dir_prefers_the_run_directory() -> None:
    assert state_dir({ENV_DIR: "/run/x", STATE_DIR_ENV: "/s"}) == "/run/x"
    assert state_dir({STATE_DIR_ENV: "/s", "TMPDIR": "/t"}) == "/s"
    assert state_dir({"TMPDIR": "/t"}) == "/t"
    assert state_dir({}) == "/tmp"


def test_guard_events_round_trip(tmp_path: Path) -> None:
    event = GuardEvent("execute_model", 5, 64, 2.0, 2.0, 1240.0, Verdict.SLOW, GuardAction.WAIT,
                       "waiting up to 1240 s", 99, 12.5)
    path = tmp_path / GUARD_EVENTS_FILE
    assert read_guard_events(str(path)) == []
    path.write_text(event.to_line() + "not json\n" + '{"method": "x"}\n' + event.to_line())
    assert read_guard_events(str(path)) == [event, event]
