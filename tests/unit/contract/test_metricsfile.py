"""The engine core's metrics record and the server's carried totals: written in place, read whole,
folded across a restart with no count lost or counted twice, and never a wait for the reader."""

from __future__ import annotations

import json
import os
import struct
import threading
import time
from pathlib import Path

import pytest

from pytest_enginedead.contract import metricsfile as mf
from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.contract.metricstotals import (
    BUCKETS,
    STEP_BUCKETS_S,
    Histogram,
    StepPhase,
    Totals,
    bucket_of,
    total,
)

KEY = "p8000"


def writer(directory: Path, front: int = 77, guard: bool = True) -> mf.CoreMetricsWriter:
    return mf.CoreMetricsWriter(str(directory), KEY, front, guard, True, 60.0, 300.0)


def read(w: mf.CoreMetricsWriter) -> mf.CoreMetrics:
    found = mf.read_core_metrics(w.path, os.getpid())
    assert found is not None
    return found


def test_the_record_says_the_step_in_flight_and_counts_what_ended(tmp_path: Path) -> None:
    w = writer(tmp_path)
    first = read(w)
    assert (first.front, first.guard, first.asked, first.hang_s) == (77, True, True, 60.0)
    assert (first.deadline_s, first.stock_deadline_s, first.source, first.flight) == (
        300.0, 300.0, mf.DeadlineSource.STOCK, None)
    now = time.monotonic()
    w.step_begins(StepPhase.FORWARD, 4, 64, 1240.0, 300.0, mf.DeadlineSource.POLICY, now - 2.0)
    running = read(w)
    assert (running.flight, running.step, running.batch, running.deadline_s, running.source) == (
        StepPhase.FORWARD, 4, 64, 1240.0, mf.DeadlineSource.POLICY)
    assert 2.0 <= running.age_s(time.monotonic()) < 3.0
    assert running.longest_s(time.monotonic()) >= 2.0  # the step in flight is the longest so far
    w.step_ends(StepPhase.FORWARD, 301.5, now, saved=True)
    w.step_ends(StepPhase.SAMPLING, 0.004, now)
    w.decision(GuardAction.WAIT, Verdict.SLOW)
    w.set_ranks(1, [mf.RankSlot(0, 11, 0), mf.RankSlot(1, 12, 0)])
    done = read(w)
    assert done.flight is None and done.deadline_s == 1240.0  # the last step's deadline stays in force
    forward = done.totals.steps[StepPhase.FORWARD]
    assert forward.count == 1 and forward.sum_s == 301.5
    assert done.totals.steps[StepPhase.SAMPLING].counts[0] == 1  # 4 ms: the first bucket
    assert done.totals.saved == 1 and done.totals.decided(GuardAction.WAIT, Verdict.SLOW) == 1
    assert (done.engine, done.ranks) == (1, (mf.RankSlot(0, 11, 0), mf.RankSlot(1, 12, 0)))
    assert done.longest_s(now) == 301.5
    # ten minutes on, that step has left the window
    assert done.longest_s(now + mf.LONGEST_SLOTS * mf.SLOT_S) == 0.0
    w.step_failed(Verdict.HUNG)
    w.step_failed(None)  # not a death at the deadline: not counted
    assert read(w).totals.deaths == (0, 1, 0)


def test_a_record_its_writer_left_half_written_is_read_at_once(tmp_path: Path) -> None:
    """A writer killed mid-write leaves the sequence count odd for good: a scrape must not wait for
    it; it takes the record as read, within milliseconds."""
    w = writer(tmp_path)
    w.step_ends(StepPhase.FORWARD, 0.2, time.monotonic())
    with open(w.path, "r+b") as f:
        f.write(struct.pack("<q", 7))  # odd: being written, forever
    t0 = time.monotonic()
    found = mf.read_core_metrics(w.path, 1)
    assert time.monotonic() - t0 < 0.05
    assert found is not None and found.totals.steps[StepPhase.FORWARD].count == 1


def test_a_reader_never_sees_a_step_counted_without_its_bucket(tmp_path: Path) -> None:
    """A writer busy counting steps while a reader reads: every read is whole (the histogram's
    count, sum and buckets of one moment)."""
    w = writer(tmp_path)
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            w.step_ends(StepPhase.FORWARD, 1.0, time.monotonic())

    thread = threading.Thread(target=write)
    thread.start()
    try:
        for _ in range(300):
            hist = read(w).totals.steps[StepPhase.FORWARD]
            assert hist.sum_s == float(hist.count)
    finally:
        stop.set()
        thread.join()


def test_not_a_record_is_none(tmp_path: Path) -> None:
    (tmp_path / "short").write_bytes(b"\0" * 10)
    assert mf.read_core_metrics(str(tmp_path / "short"), 1) is None
    assert mf.read_core_metrics(str(tmp_path / "absent"), 1) is None
    (tmp_path / "other").write_bytes(struct.pack("<qq", 0, 99) + b"\0" * (mf.SIZE - 16))
    assert mf.read_core_metrics(str(tmp_path / "other"), 1) is None  # another version


def test_a_gone_engine_cores_counts_move_to_the_carried_totals_and_nothing_is_lost(tmp_path: Path) -> None:
    """Two restarts: each gone engine core's counters are folded into the server's carried totals and
    its record removed; the sum over the carried totals and the records is the same before and after
    each fold (a counter never drops, never doubles).  A live one stays, another server's is not touched."""
    first = writer(tmp_path)
    first.step_ends(StepPhase.FORWARD, 0.5, time.monotonic())
    first.step_failed(Verdict.HUNG)
    other = mf.CoreMetricsWriter(str(tmp_path), "p9000", 5, False, False, 0.0, 300.0)
    os.replace(first.path, mf.record_path(str(tmp_path), KEY, 111))  # the engine core 111, gone
    live = writer(tmp_path)
    live.step_ends(StepPhase.FORWARD, 0.25, time.monotonic())

    def seen() -> Totals:
        records = [mf.read_core_metrics(p, pid) for pid, p in mf.records(str(tmp_path), KEY)]
        return total([mf.read_carried(str(tmp_path), KEY), *(r.totals for r in records if r is not None)])

    before = seen()
    assert mf.fold_dead(str(tmp_path), KEY, lambda pid: pid != 111) == 1
    assert seen() == before
    assert [pid for pid, _ in mf.records(str(tmp_path), KEY)] == [os.getpid()]
    carried = mf.read_carried(str(tmp_path), KEY)
    assert carried.died(Verdict.HUNG) == 1 and carried.steps[StepPhase.FORWARD].count == 1
    assert mf.fold_dead(str(tmp_path), KEY, lambda pid: True) == 0  # nothing gone: nothing moves
    assert os.path.exists(other.path)
    # the live one goes too: its counts join the first's
    assert mf.fold_dead(str(tmp_path), KEY, lambda pid: False) == 1
    assert seen() == before and mf.read_carried(str(tmp_path), KEY).steps[StepPhase.FORWARD].count == 2


def test_a_fold_waits_for_readers_and_a_reader_never_waits_long(tmp_path: Path) -> None:
    with mf.shared(str(tmp_path), KEY, exclusive=True) as held:
        assert held
        t0 = time.monotonic()
        with mf.shared(str(tmp_path), KEY) as reader:
            assert not reader  # a fold holds it: the reader goes on without it
        assert time.monotonic() - t0 < 0.5
        assert mf.fold_dead(str(tmp_path), KEY, lambda pid: False) == 0  # never folds without the lock
    with mf.shared(str(tmp_path), KEY) as one, mf.shared(str(tmp_path), KEY) as two:
        assert one and two  # readers share it


def test_a_torn_or_foreign_carried_file_counts_as_none(tmp_path: Path) -> None:
    (tmp_path / f"{mf.PREFIX}{KEY}.carried.json").write_text("{not json")
    assert mf.read_carried(str(tmp_path), KEY) == Totals()
    (tmp_path / f"{mf.PREFIX}{KEY}.carried.json").write_text(json.dumps({"steps": {}, "saved": -1}))
    assert mf.read_carried(str(tmp_path), KEY) == Totals()


def test_totals_go_to_json_and_back_and_refuse_what_they_are_not() -> None:
    totals = Totals((Histogram((1,) + (0,) * (BUCKETS - 1), 0.001), Histogram()), saved=3,
                    decisions=tuple(range(15)), deaths=(1, 0, 2))
    assert Totals.from_dict(json.loads(json.dumps(totals.to_dict()))) == totals
    with pytest.raises(ValueError, match="not a guard action"):
        Totals.from_dict({**totals.to_dict(), "decisions": {"sleep/SLOW": 1}})
    with pytest.raises(ValueError, match="whole number"):
        Totals.from_dict({**totals.to_dict(), "deaths": {"HUNG": 1.5}})
    with pytest.raises(ValueError, match="21 counts"):
        Totals.from_dict({**totals.to_dict(), "steps": {"forward": {"counts": [1], "sum_s": 0},
                                                          "sampling": {"counts": [0] * 21, "sum_s": 0}}})


def test_each_step_falls_in_the_first_bucket_that_holds_it() -> None:
    assert bucket_of(0.0) == 0 and bucket_of(0.005) == 0 and bucket_of(0.0051) == 1
    assert bucket_of(STEP_BUCKETS_S[-1]) == len(STEP_BUCKETS_S) - 1
    assert bucket_of(1e9) == len(STEP_BUCKETS_S)  # +Inf
    hist = Histogram(tuple(1 for _ in range(BUCKETS)), 0.0)
    assert hist.cumulative()[-1] == (float("inf"), BUCKETS) and hist.cumulative()[0] == (0.005, 1)


def test_the_metrics_directory_outlives_a_run_directory_when_one_is_named() -> None:
    assert mf.metrics_dir({"ENGINEDEAD_GUARD_STATE_DIR": "/a", "ENGINEDEAD_WORKER_DIR": "/b"}) == "/a"
    assert mf.metrics_dir({"ENGINEDEAD_WORKER_DIR": "/b", "TMPDIR": "/c"}) == "/b"
    assert mf.metrics_dir({"TMPDIR": "/c"}) == "/c" and mf.metrics_dir({}) == "/tmp"
