"""The engine core's figures, without vLLM: each step RPC through the plugin's ``collective_rpc``
timed by phase against the deadline in force, a reply read later counted when it comes, a step past
vLLM's deadline saved by the guard, and a death counted by the verdict on the workers."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.contract.metricsfile import DeadlineSource, read_core_metrics, record_path, records
from pytest_enginedead.contract.metricstotals import StepPhase
from pytest_enginedead.logic.inputs.guardconfig import GuardConfig
from pytest_enginedead.logic.timeouts.policies import Backend, TimeoutPolicy
from pytest_enginedead.vllm_plugin import guard
from pytest_enginedead.vllm_plugin.enginecore import EngineCorePlugin
from pytest_enginedead.vllm_plugin.stepmetrics import StepMetrics, metrics_key
from tests.support import procs


def output(n: int) -> SimpleNamespace:
    """What the engine core hands ``execute_model``: a step of ``n`` sequences."""
    return SimpleNamespace(num_scheduled_tokens={f"r{i}": 1 for i in range(n)}, total_num_scheduled_tokens=n)


class Executor:
    """A ``MultiprocExecutor`` stand-in: its RPC answers after ``takes_s``, or raises ``fails``."""

    def __init__(self, *pids: int) -> None:
        self.workers = [SimpleNamespace(rank=i, proc=SimpleNamespace(pid=pid)) for i, pid in enumerate(pids)]
        self.parallel_config = SimpleNamespace(node_rank=0, data_parallel_rank=0)
        self.takes_s = 0.0
        self.fails: BaseException | None = None
        self.timeouts: list[float] = []

    def collective_rpc(self, method: str, timeout: float | None = None, args: Any = (),
                       non_block: bool = False) -> Any:
        self.timeouts.append(timeout or 0.0)
        time.sleep(self.takes_s)
        if self.fails is not None:
            raise self.fails
        if non_block:
            future: Future[Any] = Future()
            future.get_response = lambda: "later"  # type: ignore[attr-defined]
            return future
        return "reply"


def engine_core(tmp_path: Path, guard_config: GuardConfig | None = None,
                *pids: int) -> tuple[EngineCorePlugin, Any]:
    core = EngineCorePlugin(None, guard_config, front=77)
    environ = {"ENGINEDEAD_GUARD_STATE_DIR": str(tmp_path), "ENGINEDEAD_METRICS_KEY": "p1"}
    core.metrics = StepMetrics.start(environ, guard_config, guard_config is not None, 77)
    rpc = guard._wrap_rpc(Executor.collective_rpc, core)
    return core, rpc


def figures(core: EngineCorePlugin) -> Any:
    assert core.metrics is not None
    found = read_core_metrics(core.metrics.writer.path, os.getpid())
    assert found is not None
    return found


@pytest.mark.processes
def test_each_step_rpc_is_timed_by_phase_and_an_empty_step_is_not(tmp_path: Path) -> None:
    with procs.worker("idle", 30.0) as worker:
        core, rpc = engine_core(tmp_path, None, worker.pid)
        executor = Executor(worker.pid)
        executor.takes_s = 0.05
        assert rpc(executor, "execute_model", 2.0, args=(output(8),)) == "reply"
        assert rpc(executor, "sample_tokens", 2.0, args=()) == "reply"
        rpc(executor, "execute_model", 2.0, args=(output(0),))  # an empty step: not one of ours
        rpc(executor, "collective_rpc_other", 2.0)  # not a step RPC
        found = figures(core)
    forward, sampling = found.totals.steps
    assert (forward.count, sampling.count) == (1, 1)
    assert 0.05 <= forward.sum_s < 1.0
    assert (found.step, found.batch, found.flight) == (1, 8, None)
    assert (found.deadline_s, found.source, found.stock_deadline_s) == (2.0, DeadlineSource.STOCK, 2.0)
    assert [(r.rank, r.pid) for r in found.ranks] == [(0, worker.pid)]
    assert executor.timeouts == [2.0, 2.0, 2.0, 2.0]  # without the guard, vLLM's deadline is unchanged


@pytest.mark.processes
def test_a_reply_read_later_is_counted_when_it_comes(tmp_path: Path) -> None:
    with procs.worker("idle", 30.0) as worker:
        core, rpc = engine_core(tmp_path, None, worker.pid)
        future = rpc(Executor(worker.pid), "execute_model", 2.0, args=(output(4),), non_block=True)
        running = figures(core)
        assert running.flight is StepPhase.FORWARD and running.totals.steps[0].count == 0
        assert future.get_response() == "later"
        assert figures(core).totals.steps[0].count == 1 and figures(core).flight is None


@pytest.mark.processes
def test_a_step_past_vllms_deadline_that_the_guard_waited_for_is_saved(tmp_path: Path) -> None:
    """Under the guard the RPC is sent with the policy's cap (the deadline in force, source policy)
    and a reply after vLLM's own deadline counts as a step saved."""
    policy = TimeoutPolicy()
    cfg = GuardConfig(policy, "reference", 60.0)
    with procs.worker("idle", 30.0) as worker:
        core, rpc = engine_core(tmp_path, cfg, worker.pid)
        executor = Executor(worker.pid)
        executor.takes_s = 1.2
        rpc(executor, "execute_model", 1.0, args=(output(64),))
        found = figures(core)
    cap = policy.timeout_s(Backend.CPU, 64, 64)
    assert executor.timeouts == [cap]
    assert (found.deadline_s, found.source, found.stock_deadline_s) == (cap, DeadlineSource.POLICY, 1.0)
    assert found.totals.saved == 1
    (tmp_path / "in-time").mkdir()
    with procs.worker("idle", 30.0) as worker:
        core, rpc = engine_core(tmp_path / "in-time", cfg, worker.pid)
        rpc(Executor(worker.pid), "execute_model", 1.0, args=(output(64),))
        assert figures(core).totals.saved == 0  # in time: nothing saved


@pytest.mark.processes
def test_a_death_is_counted_by_the_verdict_on_its_workers(tmp_path: Path) -> None:
    """vLLM's deadline without the guard on a computing worker: a false death (SLOW), judged from two
    looks; a worker gone: DEAD; the guard's own end: the verdict it ended on; vLLM's own error (a worker
    that raised): not a death at the deadline, not counted."""
    with procs.worker("busy", 30.0) as busy:
        procs.wait_for_cpu(busy.pid)
        core, rpc = engine_core(tmp_path, None, busy.pid)
        executor = Executor(busy.pid)
        executor.fails = TimeoutError("RPC call to execute_model timed out.")
        with pytest.raises(TimeoutError):
            rpc(executor, "execute_model", 2.0, args=(output(8),))
        executor.fails = RuntimeError("Worker failed with error 'boom'")
        with pytest.raises(RuntimeError):
            rpc(executor, "execute_model", 2.0, args=(output(8),))
        assert figures(core).totals.deaths == (1, 0, 0)  # SLOW only
    (tmp_path / "idle").mkdir()
    with procs.worker("idle", 30.0) as idle:
        procs.wait_until_idle(idle.pid)
        core, rpc = engine_core(tmp_path / "idle", None, idle.pid)
        executor = Executor(idle.pid)
        executor.fails = TimeoutError("RPC call to execute_model timed out.")
        with pytest.raises(TimeoutError):
            rpc(executor, "execute_model", 2.0, args=(output(8),))
        assert figures(core).totals.deaths == (0, 1, 0)  # HUNG: a genuine death
    with procs.worker("idle", 30.0) as gone:
        pid = gone.pid
    (tmp_path / "gone").mkdir()
    core, rpc = engine_core(tmp_path / "gone", None, pid)
    executor = Executor(pid)
    executor.fails = RuntimeError("cancelled")
    with pytest.raises(RuntimeError):
        rpc(executor, "execute_model", 2.0, args=(output(8),))
    assert figures(core).totals.deaths == (0, 0, 1)  # DEAD
    assert figures(core).flight is None


def test_the_guards_decisions_are_counted_by_action_and_verdict(tmp_path: Path) -> None:
    core, _ = engine_core(tmp_path)
    from pytest_enginedead.contract.guardfiles import GuardEvent

    for action, verdict in ((GuardAction.WAIT, Verdict.SLOW), (GuardAction.WAIT, Verdict.SLOW),
                            (GuardAction.END, Verdict.HUNG)):
        core.note(GuardEvent("execute_model", 1, 8, 2.0, 2.0, 600.0, verdict, action, "", 1, 0.0))
    totals = figures(core).totals
    assert totals.decided(GuardAction.WAIT, Verdict.SLOW) == 2
    assert totals.decided(GuardAction.END, Verdict.HUNG) == 1


def test_the_engine_core_keeps_figures_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """``ENGINEDEAD_METRICS=1`` without the guard: the RPC is wrapped for the figures alone;
    ``ENGINEDEAD_GUARD=1`` brings them; ``ENGINEDEAD_METRICS=0`` keeps them off with the guard on;
    a bad value is one ERROR line and no figures.  The record is named for the server's key."""
    monkeypatch.setattr(guard, "in_engine_core", lambda: True)
    installed: list[EngineCorePlugin] = []
    monkeypatch.setattr(guard, "_install", installed.append)
    base = {"ENGINEDEAD_GUARD_STATE_DIR": str(tmp_path), "ENGINEDEAD_METRICS_KEY": "p8123"}
    core = guard.register({**base, "ENGINEDEAD_METRICS": "1"})
    assert core is not None and core.guard is None and core.metrics is not None
    assert core.metrics.writer.path == record_path(str(tmp_path), "p8123", os.getpid())
    core = guard.register({**base, "ENGINEDEAD_GUARD": "1"})
    assert core is not None and core.guard is not None and core.metrics is not None
    core = guard.register({**base, "ENGINEDEAD_GUARD": "1", "ENGINEDEAD_METRICS": "0"})
    assert core is not None and core.metrics is None
    with caplog.at_level(logging.ERROR, logger="vllm.enginedead"):
        assert guard.register({**base, "ENGINEDEAD_METRICS": "sure"}) is None
    assert "ENGINEDEAD_METRICS='sure' is not 1 or 0; the metrics stay off" in caplog.text
    assert guard.register(base) is None  # nothing asked: nothing in vLLM is touched
    assert [pid for pid, _ in records(str(tmp_path), "p8123")] == [os.getpid()]


def test_an_engine_core_outside_a_server_keeps_its_own_figures() -> None:
    assert metrics_key({"ENGINEDEAD_METRICS_KEY": "p9000"}, 5) == "p9000"
    assert metrics_key({}, 5) == "f5"


def test_a_metrics_directory_it_cannot_write_is_one_error_not_a_dead_engine(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="vllm.enginedead"):
        assert StepMetrics.start({"ENGINEDEAD_GUARD_STATE_DIR": str(tmp_path / "no")}, None, False, 1) is None
    assert "cannot write the engine's figures" in caplog.text
