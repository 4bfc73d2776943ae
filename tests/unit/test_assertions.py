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
from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.harness.stacks import innermost_frames, short_path, where
from pytest_enginedead.harness.verdict import step_summary
from pytest_enginedead.logic.verdicts import LivenessSettings
from tests.support import procs
from tests.support.downstream import Downstream, Outcome


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
    downstream.copy("repro").copy_procs()
    (downstream.path / "worker.json").write_text(json.dumps({"mode": mode, "seconds": seconds}))
    t0 = time.monotonic()
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


def fake_class(module: str, name: str, base: type[BaseException] = RuntimeError) -> type[BaseException]:
    """An exception class that claims to live in ``module``, without importing it."""
    return type(name, (base,), {"__module__": module})


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


@pytest.mark.parametrize(
    ("module", "name", "expected"),
    [
        ("vllm.v1.engine.exceptions", "EngineDeadError", True),
        ("vllm.engine.async_llm_engine", "AsyncEngineDeadError", True),
        ("vllm.engine.multiprocessing", "MQEngineDeadError", True),
        ("vllm.v1.engine.exceptions", "EngineGenerateError", False),
        ("vllm.engine.exceptions", "EngineDeadError", False),
        ("builtins", "TimeoutError", False),
    ],
)
def test_is_engine_death_by_module_and_name(module: str, name: str, expected: bool) -> None:
    """Every release's death classes, by module and name; nothing else."""
    assert versions.is_engine_death(fake_class(module, name)()) is expected


def test_subclass_of_engine_death_is_recognised() -> None:
    """Matching walks the MRO, so a subclass of EngineDeadError is a death too."""
    base = fake_class("vllm.v1.engine.exceptions", "EngineDeadError")
    sub = type("MyDeadError", (base,), {"__module__": "myapp"})
    assert versions.is_engine_death(sub())
    assert not versions.is_engine_death(RuntimeError("EngineDeadError"))


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


# --- evidence from an engine that knows more than its pids ----------------------------------

STACK_DUMP = """main-thread 0x00007f00000000aa
Thread 0x00007f00000000bb (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 622 in wait
Current thread 0x00007f00000000aa (most recent call first):
  File "/site/pytest_enginedead/worker.py", line 82 in burn
  File "/site/pytest_enginedead/worker.py", line 111 in run_step
  File "/site/vllm/v1/worker/worker_base.py", line 300 in execute_model
"""


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
    assert judged["cpu_cores"] > 0.5
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


# --- the pieces of the message --------------------------------------------------------------


def test_innermost_frames_are_the_main_threads() -> None:
    """The thread named by the ``main-thread`` line, wherever faulthandler lists it."""
    frames = innermost_frames(STACK_DUMP)
    assert frames == [
        "Current thread 0x00007f00000000aa (most recent call first)",
        'File "/site/pytest_enginedead/worker.py", line 82 in burn',
        'File "/site/pytest_enginedead/worker.py", line 111 in run_step',
        'File "/site/vllm/v1/worker/worker_base.py", line 300 in execute_model',
    ]
    assert innermost_frames(STACK_DUMP, frames=1) == frames[:2]
    other_main = STACK_DUMP.replace("main-thread 0x00007f00000000aa", "main-thread 0x00007f00000000bb")
    assert innermost_frames(other_main)[1].endswith("line 320 in wait")


def test_innermost_frames_without_a_main_thread_line_show_the_first_thread() -> None:
    dump = STACK_DUMP.split("\n", 1)[1]
    assert innermost_frames(dump)[0] == "Thread 0x00007f00000000bb (most recent call first)"
    assert innermost_frames("") == [] and innermost_frames("main-thread 0x1\nno dump\n") == []


def test_step_summary() -> None:
    t = time.monotonic()
    assert step_summary([]) == "no step had finished"
    assert step_summary([StepTime(1, 8, t, None, 1)]) == "no step had finished"
    steps = [
        StepTime(1, 8, t, 0.5, 1),
        StepTime(2, 64, t, 2.0, 1),
        StepTime(3, 8, t, 0.25, 1),
        StepTime(4, 64, t, None, 1),  # running: not counted
    ]
    assert step_summary(steps) == "3 finished so far, p50 0.500 s, max 2.000 s at batch 64"


def test_client_outcome_counts_completed_requests_beside_the_failed_ones() -> None:
    from collections import Counter

    from pytest_enginedead.harness.clients import ClientOutcome

    assert ClientOutcome(64, Counter(), 0.0).describe() == "64 requests: all completed"
    everyone = ClientOutcome(64, Counter({"HTTP 500 InternalServerError": 64}), 0.0)
    assert everyone.describe() == "64 requests: 64 failed (64 with HTTP 500 InternalServerError)"
    some = ClientOutcome(64, Counter({"HTTP 500 InternalServerError": 58, "APIConnectionError": 3}), 0.0)
    assert some.describe() == (
        "64 requests: 3 completed, 61 failed "
        "(58 with HTTP 500 InternalServerError, 3 with APIConnectionError)"
    )


MODEL_SOURCE = """\
class FakeDecoderLayer:
    def forward(self, x):
        x = self.attn(x)
        return self.experts(x, self.router(x))


def helper(x):
    return x
"""


def test_where_names_the_deepest_model_frame_with_its_class_and_line(tmp_path: Any) -> None:
    """The innermost frame in the model's own module, named by class and method with its
    source line; the innermost vLLM frame beside it; torch's frames never."""
    models = tmp_path / "site" / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    module = models / "fake.py"
    module.write_text(MODEL_SOURCE)
    dump = f"""main-thread 0x00007f00000000aa
Current thread 0x00007f00000000aa (most recent call first):
  File "/site/torch/_ops.py", line 1279 in __call__
  File "/site/vllm/model_executor/layers/fused_moe/layer.py", line 1600 in forward
  File "/site/torch/nn/modules/module.py", line 1786 in _call_impl
  File "{module}", line 4 in forward
  File "{module}", line 8 in helper
  File "/site/vllm/v1/worker/gpu_model_runner.py", line 3100 in execute_model
"""
    found = where(dump, "the worker's own stack at the deadline (step 7 execute_model, 1.00 s in)")
    assert found is not None and found.model is not None
    assert (found.model.qualname, found.model.line) == ("FakeDecoderLayer.forward", 4)
    assert found.model.source == "return self.experts(x, self.router(x))"
    assert found.innermost == "vllm/model_executor/layers/fused_moe/layer.py in forward"
    assert found.describe() == (
        "FakeDecoderLayer.forward (vllm/model_executor/models/fake.py:4): "
        "return self.experts(x, self.router(x)); "
        "innermost vllm/model_executor/layers/fused_moe/layer.py in forward; "
        "the worker's own stack at the deadline (step 7 execute_model, 1.00 s in)"
    )
    # a module function keeps its plain name; no model frame at all is said so
    only_helper = dump.replace(f'  File "{module}", line 4 in forward\n', "")
    helper = where(only_helper, "x")
    assert helper is not None and helper.model is not None and helper.model.qualname == "helper"
    burn = where(STACK_DUMP, "x")
    assert burn is not None and burn.model is None
    assert burn.describe() == "pytest_enginedead/worker.py in burn (no model code on the stack); x"
    assert where("main-thread 0x1\nno dump\n", "x") is None


def test_where_counts_the_samples_before_the_deadline(tmp_path: Any) -> None:
    """Over the samples of the step until the deadline, the model function they ran under
    and its lines by count, whatever the one instant at the deadline shows: not one lucky
    frame."""
    from pytest_enginedead.contract.dumps import sample_block

    models = tmp_path / "site" / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    module = models / "fake.py"
    module.write_text(MODEL_SOURCE)

    def at(line: int, inner: str) -> list[str]:
        return [f'  File "/site/vllm/model_executor/layers/{inner}.py", line 9 in forward',
                f'  File "{module}", line {line} in forward',
                '  File "/site/vllm/v1/worker/gpu_model_runner.py", line 3100 in execute_model']

    samples = [sample_block(0.4 - 0.1 * i, at(4, "fused_moe/layer")) for i in range(3)]
    samples.insert(1, sample_block(0.35, at(3, "attention")))
    head = "main-thread 0x1\nCurrent thread 0x1 (most recent call first):\n"
    at_deadline = head + "\n".join(at(3, "attention"))
    found = where(at_deadline, "how", samples)
    assert found is not None and found.model is not None
    # every sample ran under the layer's forward: 3 at its MoE line, 2 at its attention line
    assert (found.model.line, found.count, found.total) == (4, 5, 5)
    assert [(f.line, n) for f, n in found.shares] == [(4, 3), (3, 2)]
    assert found.innermost == "vllm/model_executor/layers/fused_moe/layer.py in forward"
    assert found.describe().startswith(
        "FakeDecoderLayer.forward (vllm/model_executor/models/fake.py) in 5 of 5 samples, at "
        ":4 return self.experts(x, self.router(x)) in 3, :3 "
    ), found.describe()
    assert found.to_dict()["lines"][0] == {
        "line": 4, "source": "return self.experts(x, self.router(x))", "samples": 3}


def test_short_path_starts_at_the_package() -> None:
    assert short_path("/a/site-packages/vllm/model_executor/x.py") == "vllm/model_executor/x.py"
    assert short_path("/src/pytest_enginedead/worker.py") == "pytest_enginedead/worker.py"
    assert short_path("/elsewhere/x.py") == "/elsewhere/x.py"


LAYER_SOURCE = """\
class FakeMLP:
    def forward(self, x):
        return self.down_proj(self.gate_up_proj(x))


class FakeDecoderLayer:
    def forward(self, x):
        x = self.attn(x)
        y = self.mlp(x)
        return y + self.experts(x, self.router(x))
"""


def test_where_names_the_layer_most_samples_ran_under_with_its_lines(tmp_path: Any) -> None:
    """Samples split between a dense MLP (a function of its own, deeper) and the MoE call
    in the layer: the layer's forward is named, in every sample, with its lines by count —
    the MLP's call and the MoE block both listed, whichever box makes which one larger."""
    from pytest_enginedead.contract.dumps import sample_block

    models = tmp_path / "site" / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    module = models / "fake.py"
    module.write_text(LAYER_SOURCE)
    runner = '  File "/site/vllm/v1/worker/gpu_model_runner.py", line 3100 in execute_model'

    def layer_at(line: int, *inner: str) -> list[str]:
        return [*inner, f'  File "{module}", line {line} in forward', runner]

    mlp = layer_at(9, f'  File "{module}", line 3 in forward')
    moe = layer_at(10, '  File "/site/vllm/model_executor/layers/fused_moe/layer.py", line 9 in forward')
    attn = layer_at(8, '  File "/site/vllm/model_executor/layers/attention.py", line 5 in forward')
    samples = [sample_block(1.0 - 0.05 * i, s) for i, s in enumerate([mlp] * 5 + [moe] * 3 + [attn])]
    stack = "main-thread 0x1\nCurrent thread 0x1 (most recent call first):\n" + "\n".join(moe)
    found = where(stack, "how", samples)
    assert found is not None and found.model is not None
    assert (found.model.qualname, found.count, found.total) == ("FakeDecoderLayer.forward", 10, 10)
    assert [(f.line, n) for f, n in found.shares] == [(9, 5), (10, 4), (8, 1)]
    text = found.describe()
    assert ":9 y = self.mlp(x) in 5, :10 return y + self.experts(x, self.router(x)) in 4" in text, text
