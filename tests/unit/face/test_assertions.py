"""``assert_no_false_death`` on real processes: the bug's control flow, no vLLM, no mocks.

The "API side" waits for a worker subprocess's reply with a fixed 2 s deadline and
raises a stand-in engine-death error when it passes, as vLLM's engine core does.
Whether that death is false depends only on what the worker was doing.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pytest_enginedead import Verdict, assert_no_false_death
from pytest_enginedead.compat import versions
from pytest_enginedead.contract.dumps import DeadlineStack
from pytest_enginedead.contract.stepprogress import StepProgress
from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.harness.liveness import LivenessSettings
from tests.support import examples, procs
from tests.support.downstream import Downstream, Outcome
from tests.support.standins import STACK_DUMP, fake_class


@dataclass
class Repro:
    result: Outcome
    pid: int
    wall_s: float
    text: str
    same_object: str | None
    verdicts: str


def repro(downstream: Downstream, mode: str, seconds: float, *args: str) -> Repro:
    """Run the 2 s-deadline call against a worker in ``mode`` as a downstream test."""
    downstream.copy(examples.REPRO).copy_procs()
    (downstream.path / "worker.json").write_text(json.dumps({"mode": mode, "seconds": seconds}))
    t0 = time.monotonic()
    # the run is in-process: the suite's ``import procs`` gets our own module, as it did while the
    # tests imported it as ``procs``, so the worker's title (a path) stays short enough for the
    # verdict's line to show whole (it cuts a title at 120 characters)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "procs", procs)
        result = downstream.run(*args)
    wall = time.monotonic() - t0
    same = downstream.path / "same-object"
    return Repro(
        result,
        int((downstream.path / "worker.pid").read_text()),
        wall,
        result.stdout.str() + result.stderr.str(),
        same.read_text() if same.exists() else None,
        (downstream.path / "verdicts").read_text(),
    )


# --- the bug's control flow, as a downstream repo would see it --------------------------


def test_busy_worker_past_the_deadline_is_a_false_death(downstream: Downstream) -> None:
    """A worker computing for 5 s when the 2 s deadline fires: the test fails, naming it."""
    r = repro(downstream, "busy", 5.0)
    r.result.assert_outcomes(failed=1)
    assert r.verdicts == "SLOW"
    assert "false engine death" in r.text
    assert "StandInError" in r.text  # which error was raised
    assert f"(pid {r.pid})" in r.text  # which process was still computing
    assert re.search(rf"procs.py busy \(pid {r.pid}\): running, \d+ % of a core", r.text)
    assert "while its worker was still computing" in r.text
    assert re.search(r"\(2\.\d s after the call began\)", r.text)
    assert r.same_object is None  # the stand-in error did not reach the test's except
    assert r.wall_s < 20  # no hang (the verdict's own timing is asserted above)


def test_false_death_report_is_not_chained_to_the_engine_error(busy_pid: int) -> None:
    """The failure shows the evidence, not 'During handling of the above exception'."""
    with pytest.raises(pytest.fail.Exception) as info:
        with assert_no_false_death(procs.FakeEngine([busy_pid]), errors=procs.StandInError):
            time.sleep(0.4)
            raise procs.StandInError("RPC call to execute_model timed out.")
    failed = info.value
    assert failed.__context__ is None or failed.__suppress_context__
    assert "During handling" not in str(info.getrepr(style="value", chain=True))


def test_idle_worker_is_hung_and_the_error_propagates(downstream: Downstream) -> None:
    """A sleeping worker is HUNG: a genuine death, the very same error object goes through."""
    r = repro(downstream, "idle", 30.0)
    r.result.assert_outcomes(failed=1)
    assert r.verdicts == "HUNG"
    assert r.same_object == "True"
    assert "StandInError: RPC call to execute_model timed out after 2 s." in r.text
    assert "false engine death" not in r.text
    assert r.wall_s < 20  # no hang: the harness did not wait for the worker


def test_exited_worker_is_dead_and_the_error_propagates(downstream: Downstream) -> None:
    """A worker that exited at once is DEAD: the error goes through unchanged."""
    r = repro(downstream, "exit", 0.0)
    r.result.assert_outcomes(failed=1)
    assert r.verdicts == "DEAD"
    assert r.same_object == "True"
    assert "StandInError: RPC call to execute_model timed out after 2 s." in r.text
    assert "false engine death" not in r.text
    assert r.wall_s < 20  # no hang


def test_busy_threshold_option_reaches_the_assertion(downstream: Downstream) -> None:
    """--enginedead-busy-threshold above what one process can use: busy no longer counts."""
    r = repro(downstream, "busy", 5.0, "--enginedead-busy-threshold=6400%")
    r.result.assert_outcomes(failed=1)
    assert r.verdicts == "HUNG"
    assert r.same_object == "True"
    assert "false engine death" not in r.text
    assert "StandInError: RPC call to execute_model timed out" in r.text


# --- which exceptions count as an engine death ---------------------------------------------


@pytest.fixture
def busy_pid() -> Iterator[int]:
    """A worker that computes for 30 s (killed after the test), once it is computing."""
    with procs.worker("busy", 30.0) as proc:
        procs.wait_for_cpu(proc.pid)
        yield proc.pid


def test_other_exceptions_pass_through_untouched(busy_pid: int) -> None:
    """A non-death exception, even while the worker computes, is neither judged nor wrapped."""
    engine = procs.FakeEngine([busy_pid])
    err = KeyError("not an engine death")
    with pytest.raises(KeyError) as info:
        with assert_no_false_death(engine):
            time.sleep(0.3)
            raise err
    assert info.value is err
    other = ValueError("also not")
    with pytest.raises(ValueError) as info2:
        with assert_no_false_death(engine, errors=procs.StandInError):
            raise other
    assert info2.value is other
    assert engine.deaths == []  # never judged


def test_vllm_engine_dead_error_recognised_without_vllm(
    busy_pid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``vllm.v1.engine.exceptions.EngineDeadError`` is matched by name; vLLM is not imported."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "vllm", None)  # any import of vLLM would now fail
    dead = fake_class("vllm.v1.engine.exceptions", "EngineDeadError")
    with pytest.raises(pytest.fail.Exception, match="false engine death: vLLM raised EngineDeadError"):
        with assert_no_false_death(procs.FakeEngine([busy_pid])):
            time.sleep(0.5)
            raise dead("EngineCore encountered an issue.")
    assert sys.modules["vllm"] is None


def test_same_name_elsewhere_is_not_an_engine_death(busy_pid: int) -> None:
    """Only vLLM's modules count: a look-alike class name from another module passes through."""
    lookalike = fake_class("myapp.errors", "EngineDeadError")
    err = lookalike("mine")
    with pytest.raises(lookalike) as info:
        with assert_no_false_death(procs.FakeEngine([busy_pid])):
            time.sleep(0.3)
            raise err
    assert info.value is err


def test_threshold_argument_decides_busy(busy_pid: int) -> None:
    """``threshold=`` above one core: the computing worker no longer counts as SLOW."""
    err = procs.StandInError("timed out")
    with pytest.raises(procs.StandInError) as info:
        with assert_no_false_death(procs.FakeEngine([busy_pid]), errors=procs.StandInError, threshold=64.0):
            time.sleep(0.4)
            raise err
    assert info.value is err


def test_no_exception_no_failure_and_sampler_stops(busy_pid: int) -> None:
    """A block that returns normally passes, and the background sampler is stopped."""
    with assert_no_false_death(procs.FakeEngine([busy_pid]), errors=(procs.StandInError,)):
        time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name == "enginedead-sampler" and t.is_alive()]


#: the worker inside the MoE layers' kernels
OTHER_DUMP = """main-thread 0x00007f00000000aa
Current thread 0x00007f00000000aa (most recent call first):
  File "/site/torch/_ops.py", line 1279 in __call__
  File "/site/vllm/_custom_ops.py", line 4498 in cpu_fused_moe
  File "/site/vllm/model_executor/layers/fused_moe/experts/cpu_moe.py", line 303 in apply
  File "/site/vllm/v1/worker/gpu_model_runner.py", line 3100 in execute_model
"""

#: the worker after its step ended and the engine core told it to stop
SHUTDOWN_DUMP = """main-thread 0x00007f00000000aa
Current thread 0x00007f00000000aa (most recent call first):
  File "/site/vllm/v1/worker/gpu_model_runner.py", line 6738 in _cleanup_profiling_kv_cache
  File "/site/vllm/v1/worker/gpu_model_runner.py", line 6692 in shutdown
  File "/site/vllm/v1/executor/multiproc_executor.py", line 973 in worker_main
"""


@dataclass
class RichEngine:
    """Duck-types the parts of ``EngineHandle`` the assertion uses for its evidence."""

    pids: list[int]
    worker_pids: list[int]
    step: StepTime | None
    deaths: list[dict[str, Any]] = field(default_factory=list)
    stacks_for: list[int] = field(default_factory=list)
    liveness_settings: LivenessSettings = field(default_factory=LivenessSettings)
    #: what the worker dumped itself at the deadline (None: it wrote nothing)
    at_deadline: str | None = STACK_DUMP
    #: a step that has ended since (it ran past the deadline)
    ended: StepTime | None = None

    timeout_s = 2.0

    @property
    def evidence(self) -> RichEngine:
        """Its records and stacks: the stand-in holds both sides."""
        return self

    def death_facts(self) -> dict[str, Any]:
        return {
            "batch_size": 64,
            "deadline_s": 2.0,
            "deadline_source": "the enginedead_timeout marker",
            "policy": "reference",
            "policy_deadline_s": 1240.0,
        }

    def has_record(self, pid: int) -> bool:
        return pid in self.worker_pids

    def waiting_for_a_peer(self, pid: int) -> bool:
        return False  # one rank: no collective to wait in

    def in_collective_s(self, pid: int, now: float) -> float | None:
        return None

    def step_progress(self, pid: int) -> StepProgress | None:
        return None  # its layers not seen: its CPU decides

    def running_step(self, pid: int) -> StepTime | None:
        return self.step

    def step_times_since_start(self) -> list[StepTime]:
        done = StepTime(1, 8, time.monotonic() - 10, 0.25, self.worker_pids[0])
        return [done] + ([self.step] if self.step else []) + ([self.ended] if self.ended else [])

    def deadline_stack(
        self, pid: int, step: StepTime, deadline_s: float, wait_s: float | None = 0.5
    ) -> DeadlineStack | None:
        if wait_s is not None:  # a look that may wait for the dump; None only reads what is there
            self.stacks_for.append(pid)
        if self.at_deadline is None or (step.seconds is not None and step.seconds < 2.0):
            return None  # the worker dumps only a step that reaches the 2 s deadline
        at = min(time.monotonic(), step.started + 2.004)
        return DeadlineStack(step.step, "execute_model", 2.0, 2.004, at, self.at_deadline)

    def capture_stack(self, pid: int, timeout_s: float = 0.4) -> str | None:
        self.stacks_for.append(pid)
        return OTHER_DUMP

    def note_death(self, finding: dict[str, Any]) -> None:
        self.deaths.append(finding)


def test_false_death_message_carries_the_evidence(busy_pid: int) -> None:
    """Step record, deadline, policy, step times and the worker's main-thread stack."""
    with procs.worker("idle", 30.0) as core:
        step = StepTime(3, 64, time.monotonic() - 1.5, None, busy_pid)
        engine = RichEngine([core.pid, busy_pid], [busy_pid], step)
        with pytest.raises(pytest.fail.Exception) as info:
            with assert_no_false_death(engine, errors=procs.StandInError):
                time.sleep(0.5)
                raise procs.StandInError("timed out")
    text = str(info.value)
    assert text.startswith("false engine death: vLLM raised StandInError")
    assert f"(pid {busy_pid})" in text
    assert f"(pid {core.pid})" not in text  # only the worker is judged when it is known
    assert re.search(r"step 3, batch 64, had run \d+\.\d s and was still running", text)
    assert "deadline:   2 s (the enginedead_timeout marker)" in text
    assert "policy:     reference allows 1240 s at batch 64 on CPU" in text
    assert "steps:      1 finished so far, p50 0.250 s, max 0.250 s at batch 8" in text
    assert 'File "/site/pytest_enginedead/worker.py", line 82 in burn' in text
    assert "threading.py" not in text  # the main thread's frames, not another thread's
    # where the step was when vLLM gave up: the worker's own dump at the deadline
    assert (
        "where:      pytest_enginedead/worker.py in burn (no model code on the stack); "
        "the worker's own stack at the deadline (step 3 execute_model, 2.00 s in)"
    ) in text
    assert versions.DEADLINE_ENV in text  # what to change
    assert engine.stacks_for == [busy_pid]
    [death] = engine.deaths
    assert death["verdict"] == "SLOW"
    assert [p["pid"] for p in death["processes"]] == [busy_pid]
    assert death["processes"][0]["step"] == {"step": 3, "batch_size": 64}
    assert death["where"] == {
        "model": None,
        "innermost": "pytest_enginedead/worker.py in burn",
        "source": "the worker's own stack at the deadline (step 3 execute_model, 2.00 s in)",
        "samples": 1,
        "samples_here": 1,
        "lines": [],
    }


def test_without_a_deadline_stack_the_evidence_says_it_came_after(busy_pid: int) -> None:
    """No dump from the worker at the deadline: a stack taken now, and the line says so."""
    with procs.worker("idle", 30.0) as core:
        step = StepTime(3, 64, time.monotonic() - 1.5, None, busy_pid)
        engine = RichEngine([core.pid, busy_pid], [busy_pid], step, at_deadline=None)
        with pytest.raises(pytest.fail.Exception) as info:
            with assert_no_false_death(engine, errors=procs.StandInError):
                time.sleep(0.5)
                raise procs.StandInError("timed out")
    assert (
        "where:      vllm/model_executor/layers/fused_moe/experts/cpu_moe.py in apply "
        "(no model code on the stack); a stack taken after the death (the worker wrote none at the deadline)"
    ) in str(info.value)
    assert engine.stacks_for == [busy_pid, busy_pid]  # asked for the deadline's, then took one


@pytest.mark.parametrize("after", ["gone", "step-ended", "idle-in-step"])
@pytest.mark.parametrize("dumped", [True, False], ids=["dump-at-deadline", "no-dump"])
def test_a_death_heard_of_late_is_judged_as_of_the_deadline(dumped: bool, after: str) -> None:
    """A server's clients hear of the death after vLLM declared it; by then the step may
    have ended or vLLM may have stopped the worker.  Its own dump at the deadline shows it
    in the step: SLOW, from the samples up to then.  Without that dump it may have died or
    ended its step first: genuine."""
    with procs.worker("busy", 30.0) as worker, procs.worker("idle", 30.0) as core:
        procs.wait_for_cpu(worker.pid)
        step = StepTime(3, 64, time.monotonic(), None, worker.pid)
        engine = RichEngine([core.pid, worker.pid], [worker.pid], step,
                            at_deadline=STACK_DUMP if dumped else None)
        err = procs.StandInError("EngineCore encountered an issue")
        with pytest.raises((pytest.fail.Exception, procs.StandInError)) as info:
            with assert_no_false_death(engine, errors=procs.StandInError):
                time.sleep(2.3)  # past the 2 s deadline, the worker computing
                if after == "gone":
                    worker.kill()  # vLLM's shutdown after the death
                    worker.wait(timeout=10)
                else:
                    worker.send_signal(signal.SIGSTOP)  # idle: its step over, or stuck in it
                    if after == "step-ended":
                        engine.step = None
                        engine.ended = replace(step, seconds=2.4)
                time.sleep(1.2)  # the clients' errors arrive
                raise err
        with contextlib.suppress(ProcessLookupError):
            worker.send_signal(signal.SIGCONT)
    [death] = engine.deaths
    [judged] = death["processes"]
    assert judged["pid"] == worker.pid
    if not dumped:
        assert info.value is err and death["verdict"] in ("DEAD", "HUNG")
        assert not judged["judged_at_deadline"]
        return
    text = str(info.value)
    assert death["verdict"] == "SLOW" and judged["judged_at_deadline"] and judged["alive"], text
    assert judged["cpu_cores"] > 0.2  # computing (an idle worker is ~0), on a box however loaded
    assert re.search(r"step 3, batch 64, had run (1\.9|2\.0) s and was still running", text), text
    assert "afterwards: judged as of the deadline, from its own stack then; by the verdict " + {
        "gone": "the worker was gone", "step-ended": "its step had ended",
        "idle-in-step": "it sat idle in its step"}[after] in text


def test_busy_outside_a_model_step_is_not_a_false_death(busy_pid: int) -> None:
    """Computing with a step record but no step running: HUNG, the error propagates."""
    engine = RichEngine([busy_pid], [busy_pid], step=None)
    err = procs.StandInError("timed out")
    with pytest.raises(procs.StandInError) as info:
        with assert_no_false_death(engine, errors=procs.StandInError):
            time.sleep(0.4)
            raise err
    assert info.value is err
    [death] = engine.deaths
    assert death["verdict"] == Verdict.HUNG.name
    assert engine.stacks_for == []  # no stack taken for a genuine death
