"""A worker's publisher: its record (step, CPU of its own window), its stack when asked, its last word."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pytest_enginedead.contract import progress
from pytest_enginedead.contract.dumps import MAIN_THREAD_PREFIX
from pytest_enginedead.contract.stepprogress import Phase, StepProgress
from pytest_enginedead.harness import stacks
from pytest_enginedead.invllm.progress import Publisher, StepState, thread_stacks
from pytest_enginedead.invllm.worker import StepRecorder


class Steps:
    def __init__(self) -> None:
        self.state = StepState()
        self.progress: StepProgress | None = None

    def step_state(self) -> StepState:
        return self.state

    def step_progress(self) -> StepProgress | None:
        return self.progress


class Fake:
    """The publisher's clock and CPU, moved by hand."""

    def __init__(self) -> None:
        self.now, self.cpu_s = 10.0, 5.0

    def clock(self) -> float:
        return self.now

    def cpu(self) -> float:
        return self.cpu_s


def publisher(tmp_path: Path, source: Steps, fake: Fake) -> Publisher:
    return Publisher(str(tmp_path), 1, 3, source, clock=fake.clock, wall=lambda: 123.0, cpu=fake.cpu,
                     start=False)


def test_the_record_carries_the_step_and_the_cpu_use_over_its_own_last_window(tmp_path: Path) -> None:
    source, fake = Steps(), Fake()
    pub = publisher(tmp_path, source, fake)
    first = pub.record()
    assert (first.node, first.rank, first.seq, first.window_s, first.step) == (1, 3, 1, 0.0, 0)
    source.state = StepState(step=4, batch=64, running=True, began=10.0, finished=3)
    for _ in range(4):  # computing flat out for 2 s, half a second apart
        fake.now += 0.5
        fake.cpu_s += 0.5
    rec = pub.record()
    assert rec.seq == 2 and rec.cores == 1.0 and rec.window_s == 2.0 and rec.running and rec.ran_s == 2.0
    for _ in range(4):  # then idle: the window keeps about one second of its past
        fake.now += 0.5
        rec = pub.record()
    assert rec.cores == 0.0 and 1.0 <= rec.window_s <= 1.5 and rec.wall == 123.0
    source.state = StepState(step=4, batch=64, running=False, began=10.0, last_s=2.5, finished=4)
    rec = pub.record()
    assert (rec.running, rec.ran_s, rec.steps) == (False, 2.5, 4)
    assert not rec.layered and rec.step_progress(0.0, 50.0) is None  # no layers seen: none published


def test_the_record_carries_the_steps_progress_as_ages_a_reader_puts_on_its_own_clock(tmp_path: Path) -> None:
    """Machines share no monotonic clock: the publisher sends how long ago its step advanced, began
    and entered its layers, and a reader with its own clock gets the same progress back."""
    source, fake = Steps(), Fake()
    fake.now = 20.0
    source.state = StepState(step=4, batch=64, running=True, began=12.0, finished=3)
    source.progress = StepProgress(4, Phase.FORWARD, 7, 30, 12.0, 13.0, 19.5, 0.8)
    rec = publisher(tmp_path, source, fake).record()
    assert (rec.layered, rec.layer, rec.layers, rec.stalled_s, rec.forward_s) == (True, 7, 30, 0.5, 7.0)
    assert rec.in_collective_s == -1.0  # no collective mark in this process
    here = rec.step_progress(age_s=0.25, now=5000.0)  # its record seen 0.25 s after it was written
    assert here == StepProgress(4, Phase.FORWARD, 7, 30, 5000.0 - 0.25 - 8.0, 5000.0 - 0.25 - 7.0,
                                5000.0 - 0.25 - 0.5, 0.8)
    assert here.stalled_s(5000.0) == 0.75


def test_a_stack_request_is_answered_once_with_every_thread_and_the_main_one_named(tmp_path: Path) -> None:
    pub = publisher(tmp_path, Steps(), Fake())
    assert not pub.answer()  # nothing asked
    token = progress.request_stack(str(tmp_path), 1, 3)
    assert pub.answer() and not pub.answer()  # answered once
    text = progress.read_stack_answer(str(tmp_path), 1, 3, token)
    assert text is not None and text.startswith(MAIN_THREAD_PREFIX)
    frames = stacks.innermost_frames(text)
    assert frames and "test_a_stack_request_is_answered" in "\n".join(frames)


def test_a_request_made_before_the_publisher_started_is_not_its_own(tmp_path: Path) -> None:
    progress.request_stack(str(tmp_path), 1, 3)
    assert not publisher(tmp_path, Steps(), Fake()).answer()


def test_thread_stacks_read_like_a_faulthandler_dump() -> None:
    done = threading.Event()
    other = threading.Thread(target=done.wait, daemon=True)
    other.start()
    try:
        text = thread_stacks(main_ident=threading.get_ident())
    finally:
        done.set()
    assert text.count("(most recent call first):") >= 2
    assert "Current thread 0x" in text
    assert "test_thread_stacks_read_like_a_faulthandler_dump" in "\n".join(stacks.innermost_frames(text))


def test_the_thread_publishes_every_interval_and_its_last_record_says_it_ended(tmp_path: Path) -> None:
    pub = Publisher(str(tmp_path), 1, 3, Steps(), every_s=0.05, request_every_s=0.01)
    path = progress.progress_path(str(tmp_path), 1, 3)
    time.sleep(0.3)
    seen = progress.read_progress(path)
    assert seen is not None and seen.seq >= 3 and not seen.ended and seen.pid > 0 and seen.host
    token = progress.request_stack(str(tmp_path), 1, 3)
    time.sleep(0.1)
    assert progress.read_stack_answer(str(tmp_path), 1, 3, token) is not None
    pub.close()
    last = progress.read_progress(path)
    assert last is not None and last.ended
    pub.close()  # twice is once


def test_the_step_recorder_publishes_its_steps_and_runs_a_fault_on_its_node_only(tmp_path: Path) -> None:
    """Without a run directory (a production node that only publishes) it records nothing else; the
    control comes from the progress directory, and ``nodes=[1]`` spares node 0's ranks."""
    from pytest_enginedead.contract.control import Control, Injection, write_control

    d = str(tmp_path)
    write_control(d, Control(1, 30.0, Injection(slow_s_per_seq=0.05, nodes=(1,))))
    recorder = StepRecorder(None, progress_dir=d)
    try:
        recorder.publish_as(1, 1)
        recorder.publish_as(1, 1)  # once
        t0 = time.monotonic()
        assert recorder.run_step(4, lambda: "out", rank=1, node=0) == "out"
        assert time.monotonic() - t0 < 0.1  # node 0: no burn
        recorder.run_step(4, lambda: None, rank=1, node=1)
        assert time.monotonic() - t0 >= 0.2  # node 1: 4 x 0.05 s
        state = recorder.step_state()
        assert (state.step, state.batch, state.running, state.finished) == (2, 4, False, 2)
        assert recorder.run_sample(lambda: "sampled") == "sampled"
        assert not recorder.step_state().running and recorder.step_state().finished == 2
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("steps-")] == []
    finally:
        recorder.close()
    last = progress.read_progress(progress.progress_path(d, 1, 1))
    assert last is not None and last.ended and last.step == 2
