"""The guard inside ``VLLM::EngineCore``, without vLLM: the start-up record it writes, its
state file, the stale states it removes."""

from __future__ import annotations

import logging
import os
import re
import struct
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_enginedead.contract.collectives import mark_path
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
from pytest_enginedead.contract.stepprogress import ProgressWriter, layers_path
from pytest_enginedead.logic.inputs.guardconfig import GuardConfig
from pytest_enginedead.vllm_plugin import enginecore, guard
from pytest_enginedead.vllm_plugin import watch as watch_module
from pytest_enginedead.vllm_plugin.enginecore import EngineCorePlugin
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
    variable, the policy and what it returned, and the guard stays off (no state file); the metrics the
    guard asked for still run, without it, so /metrics shows the guard off where it was asked for (with
    ``ENGINEDEAD_METRICS=0`` nothing in vLLM is patched); with ``ENGINEDEAD_POLICY`` set instead, a
    WARNING names the guard's variable."""
    monkeypatch.setattr(guard, "in_engine_core", lambda: True)
    installed: list[object] = []
    monkeypatch.setattr(guard, "_install", installed.append)
    (tmp_path / "gpnan_i37.py").write_text(
        "class P:\n    name = 'gp_nan'\n    def timeout_s(self, backend, n, tokens=None):\n"
        "        return float('nan')\np = P()\n")
    environ = {"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "gpnan_i37:p",
               "ENGINEDEAD_GUARD_PATH": str(tmp_path), "TMPDIR": str(tmp_path)}
    with caplog.at_level(logging.WARNING, logger="vllm.enginedead"):
        refused = guard.register(environ)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "vllm.enginedead"]
    assert said == [("ERROR", "enginedead guard: ENGINEDEAD_GUARD_POLICY='gpnan_i37:p': policy gp_nan: "
                              "timeout_s(CPU, 1) returned nan; a deadline must be a finite number of seconds "
                              ">= 1 (vLLM's smallest); the guard stays off")]
    assert refused is not None and refused.guard is None and refused.metrics is not None
    assert installed == [refused] and not list(tmp_path.glob("enginedead-guard-*.json"))
    installed.clear()
    assert guard.register({**environ, "ENGINEDEAD_METRICS": "0"}) is None and installed == []
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


@pytest.mark.processes
def test_stale_states_are_removed_and_a_fronts_own(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mine = guard_state_path(str(tmp_path), os.getpid())
    dead = guard_state_path(str(tmp_path), gone.pid)
    write_guard_state(mine, state(pid=os.getpid(), front=1))
    write_guard_state(dead, state(pid=gone.pid))
    (tmp_path / "other.json").write_text("{}")
    for pid in (os.getpid(), gone.pid):  # collective marks: a killed worker leaves its own
        Path(mark_path(str(tmp_path), pid)).write_bytes(bytes(8))
    enginecore.remove_stale_states(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [os.path.basename(mine), "other.json", os.path.basename(mark_path(str(tmp_path), os.getpid()))])
    os.remove(mark_path(str(tmp_path), os.getpid()))
    enginecore.remove_stale_states(str(tmp_path), front=2)  # not that front's
    assert os.path.exists(mine)
    enginecore.remove_stale_states(str(tmp_path), front=1)
    assert not os.path.exists(mine)


def test_the_guard_core_writes_its_state_and_keeps_an_ended_wait(tmp_path: Path) -> None:
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=3.0)  # type: ignore[arg-type]
    path = str(tmp_path / "state.json")
    core = EngineCorePlugin(None, cfg, path, front=77)
    core.write_state(None)
    first = read_guard_state(path)
    assert first is not None and first.front == 77 and first.hang_s == 3.0 and not first.in_step
    core.write_state(replace(core.state(5.0), step=3, ended=GuardAction.END, busy_at=1.0, worker=8))
    core.write_state(None)  # the step's end after the guard ended its wait: the ending stays
    last = read_guard_state(path)
    assert last is not None and last.ended is GuardAction.END and last.step == 3


def executor(*pids: int) -> SimpleNamespace:
    """A ``MultiprocExecutor``'s ``workers``: rank i's ``WorkerProcHandle`` with its process."""
    return SimpleNamespace(workers=[SimpleNamespace(rank=i, proc=SimpleNamespace(pid=pid))
                                    for i, pid in enumerate(pids)])


@pytest.mark.processes
def test_the_guard_judges_each_rank_and_names_the_one_computing(tmp_path: Path) -> None:
    """Two ranks, one busy, one idle (waiting for it in a collective): SLOW, judged on the busy
    rank, whose rank the decision names; both idle: HUNG, however little each one's CPU adds up to."""
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=60.0)  # type: ignore[arg-type]
    with procs.worker("idle", 30.0) as idle, procs.worker("busy", 30.0) as busy:
        core = EngineCorePlugin(str(tmp_path), cfg)
        core._executor = executor(idle.pid, busy.pid)
        watch = watch_module.StepWatch(core, "execute_model", 5, 64, deadline_s=1.0, cap_s=100.0)
        time.sleep(1.0)  # past their interpreters' start
        assert watch._probe(time.monotonic()) is Verdict.SLOW  # the first look: no rate yet
        time.sleep(0.5)
        watch.sent -= 1.0  # the step has run past its deadline: the next look decides
        watch._next_probe = 0.0
        watch.observe()
        (event,) = read_guard_events(guard_events_path(str(tmp_path)))
        assert (event.verdict, event.rank, event.ranks, event.pid) == (Verdict.SLOW, 1, 2, busy.pid)
        assert watch._judged().name == "VLLM::Worker rank 1 of 2"

    with procs.worker("idle", 30.0) as first, procs.worker("idle", 30.0) as second:
        core = EngineCorePlugin(None, cfg)
        core._executor = executor(first.pid, second.pid)
        watch = watch_module.StepWatch(core, "execute_model", 5, 64, deadline_s=100.0, cap_s=100.0)
        time.sleep(1.0)  # past their interpreters' start
        assert watch._probe(time.monotonic()) is Verdict.SLOW  # the first look
        time.sleep(0.5)
        assert watch._probe(time.monotonic()) is Verdict.HUNG


@pytest.mark.processes
def test_a_sleepers_stray_ticks_are_not_work() -> None:
    """The kernel counts CPU time in 10 ms ticks: a worker asleep in a hung step that wakes once a
    second for 15 ms (as a sleeping vLLM worker's polling threads and the plugin's own deadline
    sampler do) shows two ticks in some quarter-seconds, 8 % of a core.  Judged over a whole
    second, it never reads as computing: the hang's clock is never set back."""
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=60.0)  # type: ignore[arg-type]
    with procs.worker("stray", 30.0) as stray:
        procs.wait_until_idle(stray.pid)
        core = EngineCorePlugin(None, cfg)
        core._executor = executor(stray.pid)
        watch = watch_module.StepWatch(core, "execute_model", 5, 1, deadline_s=100.0, cap_s=100.0)
        assert watch._probe(time.monotonic()) is Verdict.SLOW  # the first look: no rate yet
        verdicts = []
        for _ in range(16):  # four seconds of looks, as often as the guard looks
            time.sleep(watch_module.PROBE_EVERY_S)
            verdicts.append(watch._probe(time.monotonic()))
        assert verdicts == [Verdict.HUNG] * 16
        assert watch._busy_at == watch.sent


def remote_record(tmp_path: Path, seq: int, cores: float, wall: float | None = None) -> None:
    """Node 1's rank 1 publishes a record (``contract.progress``), as a headless node's worker does."""
    from pytest_enginedead.contract.progress import RankProgress, write_progress

    write_progress(str(tmp_path), RankProgress(
        node=1, rank=1, pid=9, title="VLLM::Worker_TP1", host="n1", seq=seq,
        wall=time.time() if wall is None else wall, mono=float(seq), cpu_s=float(seq), cores=cores,
        window_s=1.0, step=5, batch=64, running=True, ran_s=1.0, steps=4))


@pytest.mark.processes
def test_the_guard_waits_for_a_computing_rank_on_another_node_and_names_it(tmp_path: Path) -> None:
    """The head's own rank idles (waiting in a collective); node 1's rank publishes that it computes:
    SLOW, and the decision names node 1's rank by its pid there."""
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=60.0)  # type: ignore[arg-type]
    run_dir, progress_dir = tmp_path / "run", tmp_path / "progress"
    run_dir.mkdir()
    progress_dir.mkdir()
    with procs.worker("idle", 30.0) as idle:
        core = EngineCorePlugin(str(run_dir), cfg, progress_dir=str(progress_dir))
        core._executor = executor(idle.pid)
        watch = watch_module.StepWatch(core, "execute_model", 5, 64, deadline_s=1.0, cap_s=100.0)
        remote_record(progress_dir, 1, 1.0)
        time.sleep(1.0)
        assert watch._probe(time.monotonic()) is Verdict.SLOW  # the first look
        time.sleep(0.3)
        remote_record(progress_dir, 2, 1.0)
        watch.sent -= 1.0
        watch._next_probe = 0.0
        watch.observe()
        (event,) = read_guard_events(guard_events_path(str(run_dir)))
        assert (event.verdict, event.action, event.rank, event.node, event.pid, event.ranks) == (
            Verdict.SLOW, GuardAction.WAIT, 1, 1, 9, 2)
        assert watch._judged().name == "VLLM::Worker rank 1 of 2 on node 1"


@pytest.mark.processes
def test_the_guard_ends_the_wait_on_a_silent_remote_rank_after_hang_s_as_dead(tmp_path: Path) -> None:
    """Node 1's rank stopped publishing (its last record is old) and the head's rank idles: no rank
    shows progress, so after hang_s the wait ends, as DEAD: vLLM's monitor cannot see that node."""
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=0.5)  # type: ignore[arg-type]
    run_dir, progress_dir = tmp_path / "run", tmp_path / "progress"
    run_dir.mkdir()
    progress_dir.mkdir()
    with procs.worker("idle", 30.0) as idle:
        core = EngineCorePlugin(str(run_dir), cfg, str(tmp_path / "state.json"),
                                progress_dir=str(progress_dir))
        core.nodes.born_wall -= 60.0  # the record below is this engine's
        core._executor = executor(idle.pid)
        watch = watch_module.StepWatch(core, "execute_model", 5, 64, deadline_s=100.0, cap_s=100.0)
        remote_record(progress_dir, 1, 1.0, wall=time.time() - 10.0)  # silent for 10 s
        time.sleep(1.0)
        assert watch._probe(time.monotonic()) is Verdict.SLOW  # the first look
        time.sleep(0.3)
        watch._busy_at -= 1.0
        watch._next_probe = 0.0
        with pytest.raises(TimeoutError, match="no rank showed work"):
            watch.observe()
    (event,) = read_guard_events(guard_events_path(str(run_dir)))
    assert (event.verdict, event.action) == (Verdict.DEAD, GuardAction.END)
    state_now = read_guard_state(str(tmp_path / "state.json"))
    assert state_now is not None and state_now.silent == "node 1 TP1" and state_now.ended is GuardAction.END


def test_a_record_older_than_the_engine_core_is_another_engines(tmp_path: Path) -> None:
    core = EngineCorePlugin(None, None, progress_dir=str(tmp_path))
    core._executor = executor()
    remote_record(tmp_path, 1, 1.0, wall=time.time() - 100.0)
    assert core.remote_looks() == []
    remote_record(tmp_path, 2, 1.0)
    assert [lk.label for lk in core.remote_looks()] == ["node 1 TP1"] and core.rank_count() == 1


@pytest.mark.processes
def test_a_rank_spinning_in_a_collective_waits_and_its_idle_peer_is_hung(tmp_path: Path) -> None:
    """vLLM's CPU all-reduce spins while it waits for a late peer: rank 0 busy, marked inside a
    collective, rank 1 idle (hung in its step).  HUNG, judged on rank 1; without the mark the
    spin reads as work (SLOW, judged on rank 0) — the guard's blind spot before the marks."""
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=60.0)  # type: ignore[arg-type]
    with procs.worker("busy", 30.0) as spinning, procs.worker("idle", 30.0) as hung:
        verdicts = {}
        for marked in (False, True):
            core = EngineCorePlugin(str(tmp_path), cfg)
            core._executor = executor(spinning.pid, hung.pid)
            path = mark_path(str(tmp_path), spinning.pid)
            if marked:  # the spinning rank's own mark: inside a collective for a second already
                with open(path, "wb") as f:
                    f.write(struct.pack("d", time.monotonic() - 1.0))
            watch = watch_module.StepWatch(core, "execute_model", 5, 64, deadline_s=100.0, cap_s=100.0)
            time.sleep(0.6)  # past their interpreters' start
            watch._probe(time.monotonic())  # the first look: no rate yet
            time.sleep(0.5)
            verdicts[marked] = (watch._probe(time.monotonic()), watch._judged().rank)
        assert verdicts == {False: (Verdict.SLOW, 0), True: (Verdict.HUNG, 1)}


def progress_of(directory: Path, pid: int, **at: float) -> ProgressWriter:
    """Worker ``pid``'s step progress record, written here as its worker would (a record in layer 2
    of 60 whose first layer began at ``forward`` and which last advanced at ``advanced``)."""
    writer = ProgressWriter(str(directory), layers=60)
    writer.begin_step(5, at["began"])
    writer.layer_begins(at["forward"])
    writer.layer_begins(at["advanced"])
    os.replace(writer.path, layers_path(str(directory), pid))  # the map follows the file
    return writer


@pytest.mark.processes
def test_a_spinning_rank_that_stopped_advancing_is_ended_after_hang_s(tmp_path: Path) -> None:
    """A worker at 100 % CPU whose step has not finished a layer for longer than hang_s: a livelock.
    The CPU rule alone called it computing and waited up to the cap; its progress says it is stuck."""
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=2.0)  # type: ignore[arg-type]
    with procs.worker("busy", 30.0) as spinning:
        now = time.monotonic()
        progress_of(tmp_path, spinning.pid, began=now - 10.0, forward=now - 9.5, advanced=now - 9.0)
        core = EngineCorePlugin(str(tmp_path), cfg, str(tmp_path / "state.json"))
        core._executor = executor(spinning.pid)
        watch = watch_module.StepWatch(core, "execute_model", 5, 64, deadline_s=100.0, cap_s=1000.0)
        watch.sent = watch._busy_at = now - 10.5  # the RPC went out before its step began
        procs.wait_for_cpu(spinning.pid)
        assert watch._probe(time.monotonic()) is Verdict.SLOW  # the first look: no rate yet
        time.sleep(0.3)
        watch._next_probe = 0.0
        with pytest.raises(TimeoutError, match="no rank showed work"):
            watch.observe()
    (event,) = read_guard_events(guard_events_path(str(tmp_path)))
    assert (event.verdict, event.action) == (Verdict.HUNG, GuardAction.END)
    state_now = read_guard_state(str(tmp_path / "state.json"))
    assert state_now is not None and state_now.ended is GuardAction.END
    assert re.match(r"spinning: \d+ % CPU, no layer finished for 9\.\d s, last layer 1 of 60",
                    state_now.reason)


@pytest.mark.processes
def test_a_rank_that_advances_is_waited_for_and_its_end_foreseen(tmp_path: Path) -> None:
    """At vLLM's deadline: layer 2 of 60 after its first took 20 s, the last advance just now: it
    computes, and at its pace it ends ~1180 s on, past the cap of 100 s, which the decision says."""
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=60.0)  # type: ignore[arg-type]
    with procs.worker("busy", 30.0) as computing:
        now = time.monotonic()
        progress_of(tmp_path, computing.pid, began=now - 21.0, forward=now - 20.0, advanced=now)
        core = EngineCorePlugin(str(tmp_path), cfg, str(tmp_path / "state.json"))
        core._executor = executor(computing.pid)
        watch = watch_module.StepWatch(core, "execute_model", 5, 64, deadline_s=1.0, cap_s=100.0)
        procs.wait_for_cpu(computing.pid)
        assert watch._probe(time.monotonic()) is Verdict.SLOW  # the first look
        time.sleep(0.3)
        watch.sent -= 1.0
        watch._next_probe = 0.0
        watch.observe()
    (event,) = read_guard_events(guard_events_path(str(tmp_path)))
    assert (event.verdict, event.action) == (Verdict.SLOW, GuardAction.WAIT)
    assert "past the cap: the engine will die at the cap unless the step speeds up" in event.outcome
    state_now = read_guard_state(str(tmp_path / "state.json"))
    assert state_now is not None and (state_now.layer, state_now.layers) == (1, 60)
    assert state_now.ends_in_s is not None and 1100 < state_now.ends_in_s < 1200
    assert re.match(r"computing: layer 2 of 60 after 2\d\.\d s, advanced \d\.\d s ago", state_now.reason)
