"""The code that runs inside ``VLLM::Worker``, run here on fake steps: no vLLM.

What the writer (``worker.StepRecorder``) records must read back exactly through the
harness's reader (``read_steps``); faults come from the control file and count
from the test that set them; the stack dump it answers ``SIGUSR2`` with is what the
failure message shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from pytest_enginedead.contract.control import CRASH_EXIT_CODE, Control, Injection, write_control
from pytest_enginedead.contract.decisions import busy as busy_rule
from pytest_enginedead.contract.dumps import (
    SAMPLE_HEADER,
    DeadlineStack,
    deadline_stack_path,
    read_deadline_stack,
)
from pytest_enginedead.contract.names import ENV_DIR
from pytest_enginedead.contract.stepprogress import Phase, read_step_progress
from pytest_enginedead.contract.steps import (
    BEGIN,
    BEGIN_LINE,
    END,
    KEY_BATCH,
    KEY_EVENT,
    KEY_STEP,
    KEY_TIME,
    SAMPLE_BEGIN,
    SAMPLE_END,
    StepTime,
    parse_steps,
    read_steps,
    steps_path,
)
from pytest_enginedead.harness.judging.stacks import innermost_frames
from pytest_enginedead.process import reading
from pytest_enginedead.vllm_plugin import faults, layers, stackdumps, worker
from tests.support import procs

ME = os.getpid()


class Clock:
    """``time.monotonic`` for the worker module: scripted instants."""

    def __init__(self, *instants: float) -> None:
        self.instants = list(instants)

    def monotonic(self) -> float:
        return self.instants.pop(0)


@pytest.fixture
def run_dir(tmp_path: Path) -> str:
    return str(tmp_path)


@pytest.fixture
def recorder(run_dir: str) -> Iterator[worker.StepRecorder]:
    """A recorder for scripted clocks: without the deadline watch, which keeps real time."""
    rec = worker.StepRecorder(run_dir, deadline_stacks=False)
    try:
        yield rec
    finally:
        rec.close()


def steps(run_dir: str) -> list[StepTime]:
    return read_steps(steps_path(run_dir, ME), ME)


# --- the round trip: writer -> reader ---------------------------------------------------------


def test_what_the_worker_writes_reads_back_exactly(
    run_dir: str, recorder: worker.StepRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step index, batch, running state, and seconds = execute phase + sample phase."""
    monkeypatch.setattr(worker, "time", Clock(100.0, 100.5, 100.625, 100.875, 101.0, 101.25))
    seen: dict[str, list[StepTime]] = {}

    def model_step() -> str:
        seen["in execute_model"] = steps(run_dir)
        return "output"

    def sampling() -> str:
        seen["in sample_tokens"] = steps(run_dir)
        return "tokens"

    assert recorder.run_step(8, model_step) == "output"
    seen["between the phases"] = steps(run_dir)
    assert recorder.run_sample(sampling) == "tokens"
    assert recorder.run_sample(lambda: "unrecorded") == "unrecorded"  # no step waits for it
    assert recorder.run_step(2, lambda: None) is None  # a step with no sampling phase

    assert seen["in execute_model"] == [StepTime(1, 8, 100.0, None, ME)]
    assert seen["between the phases"] == [StepTime(1, 8, 100.0, 0.5, ME)]
    assert seen["in sample_tokens"] == [StepTime(1, 8, 100.0, None, ME)]  # running again
    first, second = steps(run_dir)
    assert (first.step, first.batch_size, first.started, first.running) == (1, 8, 100.0, False)
    assert first.seconds == pytest.approx(0.5 + 0.25, abs=1e-6)
    assert (second.step, second.batch_size, second.started) == (2, 2, 101.0)
    assert second.seconds == pytest.approx(0.25, abs=1e-6)


def test_each_record_is_one_json_line_in_the_shared_keys(run_dir: str, recorder: worker.StepRecorder) -> None:
    recorder.run_step(3, lambda: None)
    recorder.run_sample(lambda: None)
    raw = [json.loads(line) for line in Path(steps_path(run_dir, ME)).read_text().splitlines()]
    events = [r[KEY_EVENT] for r in raw]
    assert events == [BEGIN, END, SAMPLE_BEGIN, SAMPLE_END]
    assert {r[KEY_STEP] for r in raw} == {1}
    assert raw[0][KEY_BATCH] == 3 and KEY_BATCH not in raw[1]
    assert all(isinstance(r[KEY_TIME], float) for r in raw)


def test_a_step_that_raises_is_still_ended(run_dir: str, recorder: worker.StepRecorder) -> None:
    def broken() -> None:
        raise ValueError("model failed")

    with pytest.raises(ValueError, match="model failed"):
        recorder.run_step(4, broken)
    [step] = steps(run_dir)
    assert not step.running and step.seconds is not None and step.seconds >= 0


def test_slow_fault_burns_per_sequence_before_the_step(run_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the worker's layers are not seen: slow_s_per_seq x batch of busy CPU, inside the
    recorded step, before the model's call."""
    write_control(run_dir, Control(1, 2.0, Injection(slow_s_per_seq=0.02)))
    order: list[object] = []
    real_burn = faults.burn

    def burn(seconds: float) -> None:
        order.append(seconds)
        real_burn(seconds)

    monkeypatch.setattr(faults, "burn", burn)
    rec = worker.StepRecorder(run_dir)
    try:
        rec.run_step(5, lambda: order.append("model"))
    finally:
        rec.close()
    assert order == [pytest.approx(0.1), "model"]
    [step] = steps(run_dir)
    assert step.seconds is not None and step.seconds >= 0.1


def test_worker_plugin_is_inert_without_the_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    """No run directory in the environment: nothing is patched and vLLM is not imported."""
    monkeypatch.delenv(ENV_DIR, raising=False)
    monkeypatch.setitem(sys.modules, "vllm", None)  # any import of vLLM would now fail
    assert worker.register() is None


# --- the worker's own stack at the deadline ------------------------------------------------


def test_a_step_past_its_deadline_dumps_the_workers_own_stack_then_and_a_deadline_later(
    run_dir: str,
) -> None:
    """Deadline 1 s from the control file: a 2.4 s step is dumped at its deadline and again a
    deadline later, from inside the step (the main thread in the model call); the dump names the
    step.  Each dump is due: taken past its deadline, and there before the step looked for it."""
    write_control(run_dir, Control(1, 1.0))
    rec = worker.StepRecorder(run_dir)
    path = deadline_stack_path(run_dir, ME)
    seen: list[tuple[float, DeadlineStack | None]] = []
    began = time.monotonic()

    def model_step() -> None:
        time.sleep(1.5)
        seen.append((time.monotonic() - began, read_deadline_stack(path)))
        time.sleep(0.9)

    try:
        rec.run_step(8, model_step)
        ended = time.monotonic() - began
    finally:
        rec.close()
    (looked, first), last = seen[0], read_deadline_stack(path)
    assert first is not None and last is not None
    assert (first.step, first.phase, first.deadline_s) == (1, "execute_model", 1.0)
    assert first.deadline_s <= first.ran_s < looked  # at its deadline, before the step looked for it
    assert 2 * first.deadline_s <= last.ran_s < ended  # a deadline later, still inside the step
    frames = innermost_frames(first.text, frames=50)
    assert any("in model_step" in f for f in frames) and any("in run_step" in f for f in frames)
    # and the main thread sampled evenly until then (20 per deadline), each inside the step
    assert 12 <= len(first.samples) <= stackdumps.SAMPLES_PER_DEADLINE, first.samples
    assert all("in model_step" in sample for sample in first.samples)
    assert first.samples[0].startswith(SAMPLE_HEADER)


def test_a_step_within_its_deadline_leaves_no_stack(run_dir: str) -> None:
    """Steps that end before the deadline (the healthy case) write nothing; nor does
    a sampling phase that does."""
    write_control(run_dir, Control(1, 1.0))
    rec = worker.StepRecorder(run_dir)
    try:
        for _ in range(3):
            rec.run_step(8, lambda: time.sleep(0.3))
            rec.run_sample(lambda: time.sleep(0.3))
        time.sleep(1.2)  # past a deadline of the last step, were it still armed
    finally:
        rec.close()
    assert not os.path.exists(deadline_stack_path(run_dir, ME))


def test_the_sampling_phase_has_its_own_deadline(run_dir: str) -> None:
    write_control(run_dir, Control(1, 1.0))
    rec = worker.StepRecorder(run_dir)
    try:
        rec.run_step(8, lambda: time.sleep(0.6))
        rec.run_sample(lambda: time.sleep(1.3))  # its own RPC: its own 1 s from its own start
    finally:
        rec.close()
    dump = read_deadline_stack(deadline_stack_path(run_dir, ME))
    assert dump is not None and (dump.step, dump.phase) == (1, "sample_tokens") and dump.ran_s >= 1.0


# --- the wrappers vLLM's methods get --------------------------------------------------------


def test_wrapped_execute_model_records_non_empty_steps(
    run_dir: str, recorder: worker.StepRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "_recorder", recorder)
    calls: list[Any] = []

    class Inner:
        def sample_tokens(self, grammar: object) -> str:
            calls.append(("sample", grammar))
            return "sampled"

    class FakeWorker:
        worker = Inner()

        def execute_model(self, scheduler_output: Any, extra: int = 0) -> str:
            calls.append(("execute", extra))
            return "ran"

    original = FakeWorker.execute_model
    FakeWorker.execute_model = worker.wrap_execute_model(original)  # type: ignore[method-assign]
    FakeWorker.sample_tokens = worker.wrap_sample_tokens("sample_tokens", None)  # type: ignore[attr-defined]
    fake = FakeWorker()
    assert FakeWorker.execute_model.__name__ == "execute_model"
    assert FakeWorker.execute_model.__enginedead__  # type: ignore[attr-defined]

    empty = SimpleNamespace(num_scheduled_tokens={})
    assert fake.execute_model(empty, extra=1) == "ran"  # nothing scheduled: not a step
    assert steps(run_dir) == []
    batch3 = SimpleNamespace(num_scheduled_tokens={"a": 1, "b": 1, "c": 5})
    assert fake.execute_model(batch3, extra=2) == "ran"
    assert fake.sample_tokens("g") == "sampled"  # type: ignore[attr-defined]  # forwarded to .worker
    assert calls == [("execute", 1), ("execute", 2), ("sample", "g")]
    [step] = steps(run_dir)
    assert (step.step, step.batch_size, step.running) == (1, 3, False)
    raw = Path(steps_path(run_dir, ME)).read_text()
    assert '"e":"sb"' in raw and '"e":"se"' in raw  # the sampling phase was recorded


# --- faults, in real worker processes --------------------------------------------------------

STEPPER = textwrap.dedent(
    """
    import sys
    from pytest_enginedead.contract.control import Control, Injection, write_control
    from pytest_enginedead.vllm_plugin import faults, layers, worker

    run_dir, before, after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rec = worker.StepRecorder(run_dir)
    for _ in range(before):  # an earlier test's steps on the same engine
        rec.run_step(4, lambda: None)
        rec.run_sample(lambda: None)
    if after:  # a new test: its control epoch, its faults
        write_control(run_dir, Control(2, 2.0, Injection.from_dict(eval(sys.argv[4]))))
        for _ in range(after):
            rec.run_step(4, lambda: None)
            rec.run_sample(lambda: None)
    print("finished", flush=True)
    """
)


def stepper(run_dir: str, before: int, after: int = 0, faults: str = "{}") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", STEPPER, run_dir, str(before), str(after), faults],
        stdout=subprocess.PIPE, text=True,
    )


@pytest.mark.processes
def test_crash_fault_counts_steps_from_the_test_that_set_it(run_dir: str) -> None:
    """crash_at_step=2 after three earlier steps: the fifth step begins and the worker exits."""
    proc = stepper(run_dir, before=3, after=5, faults="{'crash_at_step': 2}")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == CRASH_EXIT_CODE and "finished" not in out
    recorded = read_steps(steps_path(run_dir, proc.pid), proc.pid)
    assert [s.step for s in recorded] == [1, 2, 3, 4, 5]
    assert [s.running for s in recorded] == [False, False, False, False, True]


@pytest.mark.processes
def test_hang_fault_blocks_idle_in_its_step(run_dir: str) -> None:
    """hang_at_step=1: the step begins and the worker sits alive, idle, forever."""
    proc = stepper(run_dir, before=0, after=3, faults="{'hang_at_step': 1}")
    try:
        path = steps_path(run_dir, proc.pid)
        deadline = time.monotonic() + 30
        while not read_steps(path, proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        procs.wait_until_idle(proc.pid)
        [step] = read_steps(path, proc.pid)
        assert step.step == 1 and step.running
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.communicate(timeout=30)


# --- what the worker records of a step's shape --------------------------------------------------


def test_the_step_record_carries_what_was_scheduled(tmp_path: Path) -> None:
    rec = worker.StepRecorder(str(tmp_path))
    try:
        rec.run_step(8, lambda: None, 64, 8192, 4096, 1100, 900)
        rec.run_step(2, lambda: None)  # an older caller: unknown
    finally:
        rec.close()
    steps = read_steps(steps_path(str(tmp_path), __import__("os").getpid()), 1)
    assert [(s.batch_size, s.tokens, s.context_tokens, s.window_context_tokens, s.read_tokens,
             s.window_read_tokens) for s in steps] == [
        (8, 64, 8192, 4096, 1100, 900),
        (2, None, None, None, None, None),
    ]
    old = BEGIN_LINE % (3, 4, 1.0)  # the old writer's line still reads
    assert parse_steps([old.decode()], 1)[0].tokens is None


def test_faults_run_only_on_the_ranks_they_name(run_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``inject(ranks=[1])``: rank 1 burns before its step, rank 0 runs its step at once."""
    write_control(run_dir, Control(1, 2.0, Injection(slow_s_per_seq=0.01, ranks=(1,))))
    burned: list[tuple[int, float]] = []
    monkeypatch.setattr(faults, "burn", lambda seconds: burned.append((rank, seconds)))
    rec = worker.StepRecorder(run_dir)
    try:
        for rank in (0, 1):
            rec.run_step(5, lambda: None, rank=rank)
    finally:
        rec.close()
    assert burned == [(1, pytest.approx(0.05))]


def test_a_workers_rank_is_vllms_global_rank() -> None:
    """``WorkerWrapperBase(rpc_rank=local_rank, global_rank=rank)`` (0.27.1-0.32.0)."""
    from pytest_enginedead.compat.in_worker import worker_rank

    assert worker_rank(SimpleNamespace(rpc_rank=0, global_rank=3)) == 3
    assert worker_rank(SimpleNamespace(rpc_rank=2)) == 2
    assert worker_rank(object()) == 0


# --- progress inside the step: each layer seen as it begins --------------------------------------


class Impl:
    """An attention implementation: vLLM's attention op calls ``impl.forward(layer, ...)`` per layer."""

    def forward(self, layer: Any, query: int) -> int:
        return query + 1


def model_of(n: int) -> tuple[SimpleNamespace, Any]:
    """A worker whose model has ``n`` attention layers, and its forward pass (each layer in turn)."""
    attn = [SimpleNamespace(impl=Impl(), layer_name=f"model.layers.{i}.self_attn.attn") for i in range(n)]
    context = {a.layer_name: a for a in attn} | {"model.layers.0.mlp.experts": SimpleNamespace(impl=None)}
    wrapper = SimpleNamespace(vllm_config=SimpleNamespace(
        compilation_config=SimpleNamespace(static_forward_context=context)))

    def forward() -> int:
        x = 0
        for a in attn:
            x = a.impl.forward(a, x)
        return x

    return wrapper, forward


@pytest.fixture
def restore_impl() -> Iterator[None]:
    original = Impl.forward
    yield
    Impl.forward = original  # type: ignore[method-assign]
    layers._on_layer = None


def test_each_layer_is_seen_and_a_slow_step_advances_through_them(
    run_dir: str, monkeypatch: pytest.MonkeyPatch, restore_impl: None
) -> None:
    """Four layers: the progress record counts them as they begin, and a slow step's burn is spread
    over them (a quarter at each), so the step advances as real compute does."""
    write_control(run_dir, Control(1, 2.0, Injection(slow_s_per_seq=0.01)))
    burned: list[float] = []
    monkeypatch.setattr(faults, "burn", burned.append)
    wrapper, forward = model_of(4)
    rec = worker.StepRecorder(run_dir, deadline_stacks=False, layers_dir=run_dir)
    try:
        rec.hook_layers(wrapper)
        seen: list[tuple[int, Phase]] = []
        original = rec.model.layer_begins

        def noting() -> None:
            original()
            p = read_step_progress(run_dir, ME)
            assert p is not None
            seen.append((p.layer, p.phase))

        layers._on_layer = noting
        assert rec.run_step(8, forward) == 4  # the model's own result, through the wrapped layers
        p = read_step_progress(run_dir, ME)
        assert p is not None and (p.layers, p.finished_layers, p.forward_done) == (4, 4, True)
        assert seen == [(1, Phase.FORWARD), (2, Phase.FORWARD), (3, Phase.FORWARD), (4, Phase.FORWARD)]
        assert burned == [pytest.approx(0.02)] * 4  # 0.01 s x 8 sequences over 4 layers
        (recorded,) = steps(run_dir)
        assert recorded.layers == 4  # the step record says the forward pass went through all four
        rec.run_sample(lambda: None)
        p = read_step_progress(run_dir, ME)
        assert p is not None and p.phase is Phase.IDLE
        forward()  # a forward pass outside a recorded step (vLLM's warm-up) is not a layer of one
        assert read_step_progress(run_dir, ME) == p
    finally:
        rec.close()
    assert read_step_progress(run_dir, ME) is None  # removed at the worker's exit


SPINNER = """
import sys, threading
from types import SimpleNamespace
sys.path.insert(0, {root!r})
from pytest_enginedead.contract.control import Control, Injection, write_control
from pytest_enginedead.vllm_plugin import worker
from tests.unit.vllm_plugin.test_worker import model_of
write_control({run_dir!r}, Control(1, 60.0, Injection({fault}=2)))
wrapper, forward = model_of(6)
rec = worker.StepRecorder({run_dir!r}, deadline_stacks=False, layers_dir={run_dir!r})
rec.hook_layers(wrapper)
rec.run_step(1, forward)
print("first", flush=True)
rec.run_step(1, forward)
"""


@pytest.mark.processes
@pytest.mark.parametrize(("fault", "busy"), [("spin_at_step", True), ("hang_at_step", False)])
def test_a_spin_and_a_hang_stop_the_step_in_its_middle_layer(run_dir: str, fault: str, busy: bool) -> None:
    """At its second step the worker stops in layer 3 of 6: spinning at a whole core, or idle; its
    progress record says so, and its CPU says which."""
    root = str(Path(__file__).resolve().parents[3])
    code = SPINNER.format(root=root, run_dir=run_dir, fault=fault)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "first"
        time.sleep(1.0)
        p = read_step_progress(run_dir, proc.pid)
        assert p is not None and (p.step, p.phase, p.layer, p.finished_layers) == (2, Phase.FORWARD, 3, 2)
        assert p.stalled_s(time.monotonic()) >= 0.9
        (cores,) = reading.look([psutil.Process(proc.pid)], 0.5)
        assert busy_rule(cores, 0.5) is busy, cores
        assert proc.poll() is None  # it stays there
    finally:
        proc.kill()
        proc.wait()
