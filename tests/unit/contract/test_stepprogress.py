"""The progress record: written in place by one worker, read whole by anyone, across processes."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_enginedead.contract.stepprogress import (
    Phase,
    ProgressWriter,
    StepProgress,
    expected_gap_s,
    layers_path,
    layers_pid,
    read_step_progress,
    size_class,
)


def test_a_step_through_its_phases(tmp_path: Path) -> None:
    w = ProgressWriter(str(tmp_path), layers=3)
    read = lambda: read_step_progress(str(tmp_path), os.getpid())  # noqa: E731
    p = read()
    assert p is not None and (p.phase, p.step, p.in_step) == (Phase.IDLE, 0, False)
    w.begin_step(1, 10.0)
    assert read() == StepProgress(1, Phase.PREPARE, 0, 3, 10.0, 0.0, 10.0, 0.0)
    w.layer_begins(11.0)  # the first layer: the end of preparing is not a gap between layers
    w.layer_begins(11.5)
    w.layer_begins(13.5)
    p = read()
    assert p is not None and (p.phase, p.layer, p.finished_layers, p.pace_s) == (Phase.FORWARD, 3, 2, 2.0)
    assert p.where() == "layer 3 of 3" and p.per_layer_s() == pytest.approx(1.25)
    assert p.ends_in_s(14.0) == pytest.approx(1.25 - 0.5)  # one layer left, half a second into it
    w.forward_ends(17.5)
    p = read()
    assert p is not None and (p.forward_done, p.finished_layers, p.pace_s, p.advanced) == (True, 3, 4.0, 17.5)
    assert p.tail == pytest.approx(4.0 / 1.25)  # its last layer and the logits: 3.2 of its layers
    assert p.ends_in_s(18.0) is None and p.where() == "after its last layer (3 of 3)"
    w.phase_begins(Phase.SAMPLE, 18.0)
    w.phase_begins(Phase.IDLE, 18.1)
    w.begin_step(2, 20.0)
    w.layer_begins(20.1)
    p = read()
    # the pace and the tail are the run's: the step before set them
    assert p is not None and (p.step, p.layer, p.pace_s, p.forward_done) == (2, 1, 4.0, False)
    w.layer_begins(21.1)
    w.layer_begins(22.1)  # layer 3 of 3 runs: 2 finished at 1 s each; the tail is 3.2 of them
    p = read()
    assert p is not None and p.ends_in_s(22.1) == pytest.approx(3.2 * 1.0)
    w.remove()
    assert read() is None


def test_the_pace_grows_with_a_steps_tokens(tmp_path: Path) -> None:
    """The run's longest gap, seen in a decode of 8 tokens, carried to a step of 800 (a prefill
    chunk): 100 times as long; a step of fewer tokens, or of tokens not known, keeps it as it is."""
    w = ProgressWriter(str(tmp_path), layers=2)
    w.begin_step(1, 10.0, tokens=8)
    w.layer_begins(10.1)
    w.layer_begins(10.3)  # a gap of 0.2 s
    w.forward_ends(10.4)
    w.phase_begins(Phase.IDLE, 10.5)
    for tokens, pace in ((800, 20.0), (4, 0.2), (0, 0.2)):
        w.begin_step(2, 11.0, tokens=tokens)
        assert w.snapshot().pace_s == pytest.approx(pace), tokens
    w.remove()


def test_a_decode_after_a_long_prefill_keeps_the_pace_of_decodes() -> None:
    """Each size of step is held to the longest gap of its own size: a prefill's 3 s layers lengthen
    the window of the next prefill, not of the decodes beside it (a spin in a decode is still ended
    after hang_s); sizes between are carried up from the nearest below."""
    seen = {size_class(8): (0.2, 8), size_class(4096): (3.0, 4096)}
    assert expected_gap_s(seen, 8) == pytest.approx(0.2)
    assert expected_gap_s(seen, 12) == pytest.approx(0.2 * 12 / 8)  # same class, carried up
    assert expected_gap_s(seen, 4096) == pytest.approx(3.0)
    assert expected_gap_s(seen, 1024) == pytest.approx(0.2 * 1024 / 8)  # from the decodes, up
    assert expected_gap_s(seen, 8192) == pytest.approx(6.0)
    assert expected_gap_s(seen, 2) == pytest.approx(0.2)  # smaller than any seen: the nearest above
    assert expected_gap_s(seen, 0) == pytest.approx(3.0)  # size unknown: the run's longest
    assert expected_gap_s({}, 100) == 0.0


@pytest.mark.processes
def test_another_process_reads_it_while_it_is_written(tmp_path: Path) -> None:
    """A writer in a busy loop of layers; the reader always gets a whole record (its fields agree)."""
    code = (
        "import itertools; from pytest_enginedead.contract.stepprogress import ProgressWriter\n"
        f"w = ProgressWriter({str(tmp_path)!r}, layers=10**9); w.begin_step(1, 1.0)\n"
        "print('ready', flush=True)\n"
        "for i in itertools.count(1): w.layer_begins(float(i))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        seen, until = 0, time.monotonic() + 30.0
        while seen < 2000 and time.monotonic() < until:
            p = read_step_progress(str(tmp_path), proc.pid)
            if p is not None and p.layer > 1:
                assert p.advanced == float(p.layer)  # one write's fields, never two writes' halves
                seen += 1
        assert seen == 2000 and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_record_being_written_is_not_read_half(tmp_path: Path) -> None:
    w = ProgressWriter(str(tmp_path))
    with open(layers_path(str(tmp_path), os.getpid()), "r+b") as f:
        f.write(struct.pack("<q", 7))  # odd: a writer caught mid-write, forever
    assert read_step_progress(str(tmp_path), os.getpid(), tries=3) is None
    w.remove()


def test_names_and_absent_records(tmp_path: Path) -> None:
    assert layers_pid(os.path.basename(layers_path(str(tmp_path), 123))) == 123
    assert layers_pid("enginedead-collective-5") is None
    assert read_step_progress(str(tmp_path), 99999999) is None
    assert read_step_progress(None, os.getpid()) is None
