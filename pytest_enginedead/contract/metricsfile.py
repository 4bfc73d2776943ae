"""The engine core's figures for Prometheus: one mapped record per ``VLLM::EngineCore``.

The engine core maps one small file (``enginedead-metrics-<key>-<pid>`` in the metrics directory)
and rewrites its fields in place as its steps go, with no system call: the step in flight (its
phase, step, batch, when it was sent, the deadline in force and where that came from), the
longest step of each of the last minutes, its counters (``metricstotals.Totals``) and its ranks.
The serving process reads it at every scrape (``read_core_metrics``), and so does ``enginedead
probe --prometheus``: a reader never waits on the engine.  The record begins with a sequence
count the writer makes odd before it writes and even after (a seqlock); a reader retries a few
times and then takes what it read (a writer killed mid-write leaves the count odd for good).

``key`` names the server whose engine it is (``p8000``: the server on port 8000), so that the
next engine core of the same server folds a dead one's counters into the server's carried totals
(``fold_dead``) under a lock the readers share (``shared``).
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import mmap
import os
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .control import write_whole
from .decisions import Decision, GuardAction, Verdict
from .metricstotals import (
    BUCKETS,
    DECISION_KEYS,
    VERDICTS,
    Histogram,
    StepPhase,
    Totals,
    bucket_of,
    total,
)
from .names import ENV_DIR, STATE_DIR_ENV

PREFIX = "enginedead-metrics-"
VERSION = 1

#: the longest step is kept per minute, for this many minutes
LONGEST_SLOTS = 10
SLOT_S = 60.0

#: ranks an engine core's record names (more are not shown per rank)
MAX_RANKS = 64


class DeadlineSource(enum.IntEnum):
    """Where the deadline a step dies at came from."""

    STOCK = 0  # vLLM's own, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (or its default)
    POLICY = 1  # the guard's cap: its policy's timeout_s for the step's batch and tokens
    HARNESS = 2  # a test's, through the harness's control file

    @property
    def label(self) -> str:
        return self.name.lower()


_HEAD = struct.Struct("<qqqqdd")  # seq, version, front, flags, started, hang_s
#: the deadline a step dies at and where it came from, vLLM's own deadline, the step in flight
#: deadline_s, stock_deadline_s, source, flight (phase + 1, 0: none), step, batch, sent
_FLIGHT = struct.Struct("<ddqqqqd")
_SLOT = struct.Struct("<qd")  # minute, longest seconds
_PHASE = struct.Struct(f"<{BUCKETS}qd")  # counts by bucket, sum
_COUNTS = struct.Struct(f"<{len(DECISION_KEYS)}qq{len(VERDICTS)}q")  # decisions, saved, deaths
_RANK = struct.Struct("<qqq")  # rank, pid, node
_NRANKS = struct.Struct("<qq")  # engine (its data-parallel rank), ranks named
_SEQ = struct.Struct("<q")

_FLIGHT_AT = _HEAD.size
_SLOTS_AT = _FLIGHT_AT + _FLIGHT.size
_PHASES_AT = _SLOTS_AT + LONGEST_SLOTS * _SLOT.size
_COUNTS_AT = _PHASES_AT + len(StepPhase) * _PHASE.size
_RANKS_AT = _COUNTS_AT + _COUNTS.size
SIZE = _RANKS_AT + _NRANKS.size + MAX_RANKS * _RANK.size

_GUARD_ON, _GUARD_ASKED = 1, 2


def metrics_dir(environ: Mapping[str, str]) -> str:
    """Where an engine core with this environment keeps its metrics record: the guard's state directory
    when one is named (it outlives a restart), else the run directory, else ``$TMPDIR`` or ``/tmp``."""
    return (environ.get(STATE_DIR_ENV) or environ.get(ENV_DIR) or environ.get("TMPDIR") or "/tmp")


def record_path(directory: str, key: str, pid: int) -> str:
    return os.path.join(directory, f"{PREFIX}{key}-{pid}")


def carried_path(directory: str, key: str) -> str:
    return os.path.join(directory, f"{PREFIX}{key}.carried.json")


def records(directory: str, key: str) -> list[tuple[int, str]]:
    """(engine core pid, path) of every record of ``key``'s server in ``directory``."""
    head = f"{PREFIX}{key}-"
    found = []
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            digits = name[len(head):] if name.startswith(head) else ""
            if digits.isdigit():
                found.append((int(digits), os.path.join(directory, name)))
    return sorted(found)


@dataclass(frozen=True)
class RankSlot:
    """A worker of the engine core, as its record names it."""

    rank: int
    pid: int
    node: int


@dataclass(frozen=True)
class CoreMetrics:
    """One engine core's record as read."""

    pid: int
    front: int
    guard: bool
    asked: bool
    started: float  # time.time() the engine core began
    hang_s: float
    deadline_s: float  # the deadline the step in flight dies at (or the last one did)
    stock_deadline_s: float  # vLLM's own deadline (the harness's, in a test): the guard's point of suspicion
    source: DeadlineSource
    flight: StepPhase | None  # the step RPC in flight (None: none)
    step: int
    batch: int
    sent: float  # time.monotonic() it was sent
    longest: tuple[tuple[int, float], ...]  # (minute, longest step that ended in it)
    totals: Totals
    engine: int  # its data-parallel rank (0 without data parallelism)
    ranks: tuple[RankSlot, ...]

    def age_s(self, now: float) -> float:
        """How long the step RPC in flight has run (0: none)."""
        return max(0.0, now - self.sent) if self.flight is not None else 0.0

    def longest_s(self, now: float) -> float:
        """The longest step of the last ``LONGEST_SLOTS`` minutes, the one in flight included."""
        minute = int(now // SLOT_S)
        ended = [s for m, s in self.longest if minute - LONGEST_SLOTS < m <= minute]
        return max([*ended, self.age_s(now)])


class CoreMetricsWriter:
    """The engine core's side: its record, rewritten in place (one writer)."""

    def __init__(self, directory: str, key: str, front: int, guard: bool, asked: bool, hang_s: float,
                 stock_deadline_s: float) -> None:
        self.path = record_path(directory, key, os.getpid())
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)  # the mapping keeps the file
        self._seq = 0
        self._hists = [[0] * BUCKETS for _ in StepPhase]
        self._sums = [0.0] * len(StepPhase)
        self._decisions = [0] * len(DECISION_KEYS)
        self._deaths = [0] * len(VERDICTS)
        self._saved = 0
        self._slots = [(0, 0.0)] * LONGEST_SLOTS
        flags = (_GUARD_ON if guard else 0) | (_GUARD_ASKED if asked else 0)
        with self._writing():
            _HEAD.pack_into(self._map, 0, 0, VERSION, front, flags, time.time(), hang_s)
            _FLIGHT.pack_into(self._map, _FLIGHT_AT, stock_deadline_s, stock_deadline_s,
                              int(DeadlineSource.STOCK), 0, 0, 0, 0.0)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        self._seq += 1  # odd: being written
        _SEQ.pack_into(self._map, 0, self._seq)
        try:
            yield
        finally:
            self._seq += 1  # even: whole
            _SEQ.pack_into(self._map, 0, self._seq)

    def step_begins(self, phase: StepPhase, step: int, batch: int, deadline_s: float, stock_deadline_s: float,
                    source: DeadlineSource, sent: float) -> None:
        with self._writing():
            _FLIGHT.pack_into(self._map, _FLIGHT_AT, deadline_s, stock_deadline_s, int(source),
                              int(phase) + 1, step, batch, sent)

    def step_ends(self, phase: StepPhase, seconds: float, now: float, saved: bool = False) -> None:
        """The step RPC's reply came after ``seconds``: counted, and kept as its minute's longest."""
        counts = self._hists[phase]
        counts[bucket_of(seconds)] += 1
        self._sums[phase] += seconds
        minute = int(now // SLOT_S)
        i = minute % LONGEST_SLOTS
        m, longest = self._slots[i]
        self._slots[i] = (minute, max(seconds, longest) if m == minute else seconds)
        self._saved += int(saved)
        with self._writing():
            self._clear_flight()
            _SLOT.pack_into(self._map, _SLOTS_AT + i * _SLOT.size, *self._slots[i])
            _PHASE.pack_into(self._map, _PHASES_AT + phase * _PHASE.size, *counts, self._sums[phase])
            if saved:
                self._pack_counts()

    def step_failed(self, verdict: Verdict | None) -> None:
        """The step RPC raised: the engine dies of it (counted by ``verdict``; None: not ours to count)."""
        if verdict is not None:
            self._deaths[VERDICTS.index(verdict)] += 1
        with self._writing():
            self._clear_flight()
            self._pack_counts()

    def decision(self, action: GuardAction, verdict: Verdict) -> None:
        self._decisions[DECISION_KEYS.index(Decision(action, verdict))] += 1
        with self._writing():
            self._pack_counts()

    def set_ranks(self, engine: int, ranks: Sequence[RankSlot]) -> None:
        shown = list(ranks)[:MAX_RANKS]
        with self._writing():
            _NRANKS.pack_into(self._map, _RANKS_AT, engine, len(shown))
            for i, slot in enumerate(shown):
                _RANK.pack_into(self._map, _RANKS_AT + _NRANKS.size + i * _RANK.size, slot.rank, slot.pid,
                                slot.node)

    def _clear_flight(self) -> None:
        # the flight field alone: the deadline of the last step stays in force until the next
        _FLIGHT_FLIGHT.pack_into(self._map, _FLIGHT_AT + _FLIGHT_FLIGHT_OFFSET, 0)

    def _pack_counts(self) -> None:
        _COUNTS.pack_into(self._map, _COUNTS_AT, *self._decisions, self._saved, *self._deaths)

    def close(self) -> None:
        with contextlib.suppress(ValueError, BufferError):
            self._map.close()


_FLIGHT_FLIGHT = struct.Struct("<q")
_FLIGHT_FLIGHT_OFFSET = struct.calcsize("<ddq")


def read_core_metrics(path: str, pid: int, tries: int = 100) -> CoreMetrics | None:
    """An engine core's record (None: none there, or not one); never waits on its writer for more than
    a few milliseconds: a record whose count stays odd (its writer was killed mid-write) is taken as read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = b""
        for attempt in range(tries):
            data = os.pread(fd, SIZE, 0)
            if len(data) != SIZE:
                return None
            (before,) = _SEQ.unpack_from(data, 0)
            (after,) = _SEQ.unpack_from(os.pread(fd, _SEQ.size, 0), 0)
            if before % 2 == 0 and before == after:
                break
            if attempt % 20 == 19:
                time.sleep(0.001)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _parse(data, pid)


def _parse(data: bytes, pid: int) -> CoreMetrics | None:
    _, version, front, flags, started, hang_s = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        return None
    deadline_s, stock, source, flight, step, batch, sent = _FLIGHT.unpack_from(data, _FLIGHT_AT)
    slots = tuple(_SLOT.unpack_from(data, _SLOTS_AT + i * _SLOT.size) for i in range(LONGEST_SLOTS))
    phases = []
    for phase in StepPhase:
        *counts, sum_s = _PHASE.unpack_from(data, _PHASES_AT + phase * _PHASE.size)
        phases.append(Histogram(tuple(counts), sum_s))
    tallies = _COUNTS.unpack_from(data, _COUNTS_AT)
    decisions = tuple(tallies[:len(DECISION_KEYS)])
    saved = tallies[len(DECISION_KEYS)]
    deaths = tuple(tallies[len(DECISION_KEYS) + 1:])
    engine, n = _NRANKS.unpack_from(data, _RANKS_AT)
    ranks = tuple(RankSlot(*_RANK.unpack_from(data, _RANKS_AT + _NRANKS.size + i * _RANK.size))
                  for i in range(max(0, min(n, MAX_RANKS))))
    try:
        kind = DeadlineSource(source)
        phase_now = StepPhase(flight - 1) if flight else None
    except ValueError:
        return None
    return CoreMetrics(
        pid, front, bool(flags & _GUARD_ON), bool(flags & _GUARD_ASKED), started, hang_s, deadline_s, stock,
        kind, phase_now, step, batch, sent, slots, Totals((phases[0], phases[1]), decisions, saved, deaths),
        engine, ranks,
    )


# --- the server's carried totals --------------------------------------------------------------

def read_carried(directory: str, key: str) -> Totals:
    """The counters of the server's engine cores that are gone (none: zero)."""
    try:
        with open(carried_path(directory, key)) as f:
            return Totals.from_dict(json.load(f))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return Totals()


@contextlib.contextmanager
def shared(directory: str, key: str, exclusive: bool = False, wait_s: float = 0.05) -> Iterator[bool]:
    """The server's lock on its records: shared by readers, exclusive while a fold moves a gone engine
    core's counters into the carried totals.  Yields whether it holds it: after ``wait_s`` a reader goes
    on without it (a scrape never waits long), a fold does not fold."""
    fd = -1
    with contextlib.suppress(OSError):
        fd = os.open(os.path.join(directory, f"{PREFIX}{key}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    held = False
    try:
        give_up = time.monotonic() + wait_s
        while fd >= 0 and not held:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                held = True
            except OSError:
                if time.monotonic() >= give_up:
                    break
                time.sleep(0.002)
        yield held
    finally:
        if fd >= 0:
            os.close(fd)  # closing the descriptor lets the lock go


def fold_dead(directory: str, key: str, alive: Callable[[int], bool]) -> int:
    """Move the counters of ``key``'s engine cores that are gone into its carried totals, and remove
    their records; how many were folded."""
    with shared(directory, key, exclusive=True, wait_s=2.0) as held:
        if not held:
            return 0
        gone = [(pid, path) for pid, path in records(directory, key) if not alive(pid)]
        parts = [m.totals for pid, path in gone if (m := read_core_metrics(path, pid)) is not None]
        if not gone:
            return 0
        if parts:
            carried = total([read_carried(directory, key), *parts])
            write_whole(carried_path(directory, key), json.dumps(carried.to_dict(), sort_keys=True))
        for _, path in gone:
            with contextlib.suppress(OSError):
                os.remove(path)
        return len(gone)


def record_of(directory: str, pid: int) -> tuple[str, str] | None:
    """(its server's key, its path) of engine core ``pid``'s record in ``directory``, or None: how a
    reader that knows only the process finds its figures (``enginedead probe --prometheus``)."""
    tail = f"-{pid}"
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if name.startswith(PREFIX) and name.endswith(tail):
                key = name[len(PREFIX):-len(tail)]
                if key and "-" not in key:
                    return key, os.path.join(directory, name)
    return None
