"""One reading of a rank on another node: from the progress it publishes, never from ``/proc``.

The sibling of ``reading`` for the ranks this machine cannot see (vLLM's multi-node
executor: a headless node's workers).  Every reader of a remote rank asks here — the
harness's verdict, the guard inside the head's engine core, the exec probe — and its record
is judged by the one judge (``contract.judge``), from the same kinds of evidence as a local
rank: its step's progress through its layers, its CPU use, its collective, each as it published
them; gone (``DEAD``) once its record has not changed for ``SILENT_AFTER_S`` or it said it was
exiting.  See ``contract.progress`` for the records and the clocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..contract.decisions import BUSY_CORES, DEFAULT_WINDOW_S, Verdict
from ..contract.judge import Judgement, RankEvidence, judge_rank
from ..contract.progress import (
    PUBLISH_EVERY_S,
    SILENT_AFTER_S,
    RankProgress,
    read_all,
    read_stack_answer,
    request_stack,
)


def evidence(
    record: RankProgress, silent_s: float, now: float, threshold: float = BUSY_CORES
) -> RankEvidence:
    """A remote rank's evidence on the reader's clock (``now``), from its record, ``silent_s`` since
    the reader saw it change.  Gone once silent ``SILENT_AFTER_S`` or exiting.  A record too young for
    a CPU rate (its first) counts as computing while its step runs, as the guard's first look does."""
    gone = record.ended or silent_s >= SILENT_AFTER_S
    why = "it said it was exiting" if record.ended else f"no progress for {silent_s:.1f} s"
    cores, span = record.cores, record.window_s
    if span <= 0:
        cores, span = (1.0 if record.running else 0.0), DEFAULT_WINDOW_S
    waited = record.in_collective_s + silent_s if record.in_collective_s >= 0 else None
    return RankEvidence(record.label(), not gone, cores, span, record.running,
                        record.step_progress(silent_s, now), waited, why, threshold)


def judge(
    record: RankProgress, silent_s: float, now: float = 0.0, threshold: float = BUSY_CORES
) -> Judgement:
    """A remote rank's judgement by the one judge (``contract.judge``), from what it published."""
    return judge_rank(evidence(record, silent_s, now, threshold), now)


@dataclass(frozen=True)
class RemoteLook:
    """A remote rank as its latest record shows it, how long it has been silent, and its judgement."""

    record: RankProgress
    silent_s: float
    judgement: Judgement

    @classmethod
    def of(cls, record: RankProgress, silent_s: float, now: float = 0.0,
           threshold: float = BUSY_CORES) -> RemoteLook:
        """``record``, ``silent_s`` since it changed, judged at the reader's ``now``."""
        return cls(record, silent_s, judge(record, silent_s, now, threshold))

    @property
    def verdict(self) -> Verdict:
        return self.judgement.verdict

    @property
    def key(self) -> tuple[int, int]:
        return self.record.key

    @property
    def gone(self) -> bool:
        return self.verdict is Verdict.DEAD

    @property
    def label(self) -> str:
        return self.record.label()

    @property
    def state(self) -> str:
        """What it was doing, in words (``RankState``'s)."""
        return self.judgement.state.value

    def describe(self) -> str:
        """One line of evidence, as a local process's ``ProcessEvidence.describe`` reads."""
        r = self.record
        who = f"{r.title} on node {r.node} (pid {r.pid} in its node, host {r.host})"
        if self.gone:
            why = "it said it was exiting" if r.ended else f"no progress for {self.silent_s:.1f} s"
            return f"{who}: gone ({why}; its last record: {self.step_words()})"
        rate = (f"{r.cores * 100:.0f} % of a core over its last {r.window_s:.1f} s"
                if r.window_s > 0 else "no CPU rate yet")
        return f"{who}: {self.state}, {rate} (its published progress, {self.silent_s:.1f} s old)"

    def step_words(self) -> str:
        r = self.record
        if not r.step:
            return "no step yet"
        if r.running:
            return f"step {r.step}, batch {r.batch}, running {r.ran_s:.1f} s"
        return f"step {r.step}, batch {r.batch}, finished in {r.ran_s:.2f} s"


class RemoteRanks:
    """The ranks of other nodes in one progress directory, as a reader sees them arrive.

    It remembers when each rank's record last changed (its own clock): that is the
    silence.  Records of ``local_node`` (read from ``/proc`` instead) and records older
    than ``since_wall`` (another engine's, in a directory used before) are left out.
    """

    def __init__(
        self,
        directory: str,
        local_node: int = 0,
        since_wall: float = 0.0,
        threshold: float = BUSY_CORES,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.local_node = local_node
        self.since_wall = since_wall
        self.threshold = threshold
        self._clock = clock
        self._wall = wall
        #: per rank: the sequence number seen last, and when (our clock) it last changed
        self._seen: dict[tuple[int, int], tuple[int, float]] = {}
        self._last: dict[tuple[int, int], RankProgress] = {}

    def look(self) -> list[RemoteLook]:
        """Every remote rank now, by node and rank."""
        now = self._clock()
        for record in read_all(self.directory):
            if record.node == self.local_node or record.wall < self.since_wall:
                continue
            seen = self._seen.get(record.key)
            if seen is None:  # first sight: its age by wall clock
                changed = now - max(0.0, self._wall() - record.wall)
            elif record.seq != seen[0]:
                changed = now
            else:
                changed = seen[1]
            self._seen[record.key] = (record.seq, changed)
            self._last[record.key] = record
        looks = []
        for key, record in sorted(self._last.items()):
            silent = max(0.0, now - self._seen[key][1])
            looks.append(RemoteLook.of(record, silent, now, self.threshold))
        return looks

    def fresh(
        self, limit_s: float = SILENT_AFTER_S + PUBLISH_EVERY_S, poll_s: float = 0.05,
        sleep: Callable[[float], None] = time.sleep,
    ) -> list[RemoteLook]:
        """Each remote rank as of its first record since this call, or gone if it sent none.

        After an engine death: a record from before it says nothing of the moment, so each
        rank gets one interval to speak.  Its first record after the death is what it was
        doing then (its CPU over its last second): alive, whatever it does next — a headless
        node's rank may well exit once its head has died.  One that sends nothing for
        ``SILENT_AFTER_S`` is gone.
        """
        start = {look.key: look.record.seq for look in self.look()}
        first: dict[tuple[int, int], RemoteLook] = {}
        until = self._clock() + limit_s
        while True:
            looks = self.look()
            for lk in looks:
                if lk.key not in first and start.get(lk.key) != lk.record.seq:
                    alive = replace(lk.record, ended=False)  # it spoke after the death
                    first[lk.key] = RemoteLook(lk.record, lk.silent_s,
                                               judge(alive, 0.0, self._clock(), self.threshold))
            waiting = [lk for lk in looks if lk.key not in first and not lk.gone]
            if not waiting or self._clock() >= until:
                return [first.get(lk.key, lk) for lk in looks]
            sleep(poll_s)

    def stack(
        self, node: int, rank: int, timeout_s: float = 1.0, poll_s: float = 0.02,
        sleep: Callable[[float], None] = time.sleep,
    ) -> str | None:
        """The rank's Python stack, asked for through the directory (None if it did not answer)."""
        try:
            token = request_stack(self.directory, node, rank)
        except OSError:
            return None
        until = self._clock() + timeout_s
        while True:
            text = read_stack_answer(self.directory, node, rank, token)
            if text is not None or self._clock() >= until:
                return text
            sleep(poll_s)
