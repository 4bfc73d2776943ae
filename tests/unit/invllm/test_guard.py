"""The guard inside ``VLLM::EngineCore``, without vLLM: the start-up record it writes, its
state file, the stale states it removes."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_enginedead.contract.guardfiles import (
    CoreReady,
    guard_state_path,
    read_core_ready,
    read_guard_state,
    write_guard_state,
)
from pytest_enginedead.contract.names import ENV_DIR
from pytest_enginedead.invllm import guard
from pytest_enginedead.logic.guardconfig import GuardConfig
from tests.support.guards import NOT_IMPORTABLE, state


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "3.0"},
         CoreReady(0, True, True, "reference", "reference", 3.0, None)),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "ednowhere_i23:cap"},
         CoreReady(0, False, True, "ednowhere_i23:cap", None, None, NOT_IMPORTABLE)),
        ({"ENGINEDEAD_GUARD": "0"}, CoreReady(0, False, False, None, None, None, None)),
    ],
    ids=["on", "refused", "off"],
)
def test_the_engine_core_writes_the_guards_start_up_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], expected: CoreReady
) -> None:
    """``guard.register`` in the engine core (vLLM's classes not patched here): its record says
    on with which policy and hang_s, or off and why, in the format record.py gives both sides."""
    monkeypatch.setattr(guard, "in_engine_core", lambda: True)
    monkeypatch.setattr(guard, "_install", lambda core: None)
    guard.register({**environ, ENV_DIR: str(tmp_path)})
    ready = read_core_ready(str(tmp_path))
    assert ready is not None and ready.pid > 0
    assert ready == replace(expected, pid=ready.pid)


def test_stale_states_are_removed_and_a_fronts_own(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mine = guard_state_path(str(tmp_path), os.getpid())
    dead = guard_state_path(str(tmp_path), gone.pid)
    write_guard_state(mine, state(pid=os.getpid(), front=1))
    write_guard_state(dead, state(pid=gone.pid))
    (tmp_path / "other.json").write_text("{}")
    guard.remove_stale_states(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([os.path.basename(mine), "other.json"])
    guard.remove_stale_states(str(tmp_path), front=2)  # not that front's
    assert os.path.exists(mine)
    guard.remove_stale_states(str(tmp_path), front=1)
    assert not os.path.exists(mine)


def test_the_guard_core_writes_its_state_and_keeps_an_ended_wait(tmp_path: Path) -> None:
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=3.0)  # type: ignore[arg-type]
    path = str(tmp_path / "state.json")
    core = guard.Core(None, cfg, path, front=77)
    core.write_state(None)
    first = read_guard_state(path)
    assert first is not None and first.front == 77 and first.hang_s == 3.0 and not first.in_step
    core.write_state(dict(in_step=False, step=3, ended="HUNG", busy_at=1.0, updated=5.0, worker=8))
    core.write_state(None)  # the step's end after the guard ended its wait: the ending stays
    last = read_guard_state(path)
    assert last is not None and last.ended == "HUNG" and last.step == 3
