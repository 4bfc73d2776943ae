"""The guard inside ``VLLM::EngineCore``, without vLLM: the start-up record it writes, its
state file, the stale states it removes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.contract.guardfiles import (
    CoreReady,
    guard_events_path,
    guard_state_path,
    read_core_ready,
    read_guard_events,
    read_guard_state,
    write_guard_state,
)
from pytest_enginedead.contract.names import ENV_DIR
from pytest_enginedead.invllm import guard
from pytest_enginedead.logic.inputs.guardconfig import GuardConfig
from tests.support import procs
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


def test_a_production_guard_whose_policy_gives_no_cap_logs_one_error_and_stays_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``ENGINEDEAD_GUARD=1`` in a plain ``vllm.LLM`` (no harness: no run directory), its
    ``ENGINEDEAD_GUARD_POLICY`` returning NaN: at the engine core's start, one ERROR line naming the
    variable, the policy and what it returned, and the guard stays off (nothing in vLLM is patched,
    no state file); with ``ENGINEDEAD_POLICY`` set instead, a WARNING names the guard's variable."""
    monkeypatch.setattr(guard, "in_engine_core", lambda: True)
    installed: list[object] = []
    monkeypatch.setattr(guard, "_install", installed.append)
    (tmp_path / "gpnan_i37.py").write_text(
        "class P:\n    name = 'gp_nan'\n    def timeout_s(self, backend, n, tokens=None):\n"
        "        return float('nan')\np = P()\n")
    environ = {"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "gpnan_i37:p",
               "ENGINEDEAD_GUARD_PATH": str(tmp_path), "TMPDIR": str(tmp_path)}
    with caplog.at_level(logging.WARNING, logger="vllm.enginedead"):
        assert guard.register(environ) is None
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "vllm.enginedead"]
    assert said == [("ERROR", "enginedead guard: ENGINEDEAD_GUARD_POLICY='gpnan_i37:p': policy gp_nan: "
                              "timeout_s(CPU, 1) returned nan; a deadline must be a finite number of seconds "
                              ">= 1 (vLLM's smallest); the guard stays off")]
    assert installed == [] and not list(tmp_path.glob("enginedead-guard-*.json"))
    caplog.clear()
    misplaced = {"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_POLICY": "gpnan_i37:p", "TMPDIR": str(tmp_path)}
    with caplog.at_level(logging.WARNING, logger="vllm.enginedead"):
        core = guard.register(misplaced)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "vllm.enginedead"]
    assert said[0] == ("WARNING", "enginedead guard: ENGINEDEAD_POLICY='gpnan_i37:p' is the pytest option's "
                                  "variable; the guard reads ENGINEDEAD_GUARD_POLICY (unset: the reference "
                                  "policy caps each step)")
    assert said[1][1].startswith("enginedead guard on: policy reference caps each step")
    assert core is not None and installed == [core]


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
    core.write_state(dict(in_step=False, step=3, ended=GuardAction.END, busy_at=1.0, updated=5.0, worker=8))
    core.write_state(None)  # the step's end after the guard ended its wait: the ending stays
    last = read_guard_state(path)
    assert last is not None and last.ended is GuardAction.END and last.step == 3


def executor(*pids: int) -> SimpleNamespace:
    """A ``MultiprocExecutor``'s ``workers``: rank i's ``WorkerProcHandle`` with its process."""
    return SimpleNamespace(workers=[SimpleNamespace(rank=i, proc=SimpleNamespace(pid=pid))
                                    for i, pid in enumerate(pids)])


def test_the_guard_judges_each_rank_and_names_the_one_computing(tmp_path: Path) -> None:
    """Two ranks, one busy, one idle (waiting for it in a collective): SLOW, judged on the busy
    rank, whose rank the decision names; both idle: HUNG, however little each one's CPU adds up to."""
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=60.0)  # type: ignore[arg-type]
    with procs.worker("idle", 30.0) as idle, procs.worker("busy", 30.0) as busy:
        core = guard.Core(str(tmp_path), cfg)
        core._executor = executor(idle.pid, busy.pid)
        watch = guard.Watch(core, "execute_model", 5, 64, deadline_s=1.0, cap_s=100.0)
        time.sleep(1.0)  # past their interpreters' start
        assert watch._probe(time.monotonic()) is Verdict.SLOW  # the first look: no rate yet
        time.sleep(0.5)
        watch.sent -= 1.0  # the step has run past its deadline: the next look decides
        watch._next_probe = 0.0
        watch.observe()
        (event,) = read_guard_events(guard_events_path(str(tmp_path)))
        assert (event.verdict, event.rank, event.ranks, event.pid) == (Verdict.SLOW, 1, 2, busy.pid)
        assert watch._judged()[2] == "VLLM::Worker rank 1 of 2"

    with procs.worker("idle", 30.0) as first, procs.worker("idle", 30.0) as second:
        core = guard.Core(None, cfg)
        core._executor = executor(first.pid, second.pid)
        watch = guard.Watch(core, "execute_model", 5, 64, deadline_s=100.0, cap_s=100.0)
        time.sleep(1.0)  # past their interpreters' start
        assert watch._probe(time.monotonic()) is Verdict.SLOW  # the first look
        time.sleep(0.5)
        assert watch._probe(time.monotonic()) is Verdict.HUNG
