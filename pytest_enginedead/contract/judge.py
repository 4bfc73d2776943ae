"""The one judge of a worker's liveness: from each rank's evidence, its verdict and the reason.

The guard inside ``VLLM::EngineCore`` (live, at every look), the harness's verdict after an engine
death, ``enginedead probe`` and the reading of a rank on another node (``process.remote``) all
call it: a new kind of evidence is taught here once.  Pure: the standard library only.

The rule: a rank computes when its step advances, not when it merely uses CPU.

Evidence per rank (``RankEvidence``): alive or gone, its CPU use over a window, its open step and
that step's progress (``contract.stepprogress``: which layer, when it last advanced, the run's
pace), and since when it has sat in a collective.  The rules, in order:

* gone (exited, a zombie, or a remote rank that went silent) → ``DEAD``;
* no open step → ``HUNG`` (idle between steps, or busy outside a step);
* inside a collective for ``WAITING_AFTER_S`` or more → waiting for a peer (its CPU is a spin);
* inside its layers → ``SLOW`` while a layer finished within the stall window (sized from the
  run's own pace: ``stall_window_s``) and its CPU is busy; else ``HUNG``: *spinning* when its CPU
  is busy but no layer finished for the window (a livelock uses a whole core and never advances),
  *idle* when it uses no CPU;
* preparing its step (no layer yet: its inputs, a compile) or sampling, or a rank whose layers are
  not seen (no progress record) → by its CPU: busy is ``SLOW``, idle ``HUNG``.

Across ranks (``judge_ranks``): a gone rank is a genuine death (``DEAD``); else any rank that
computes makes the engine ``SLOW``, and a rank idle or waiting inside its step waits for it; else
``HUNG``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .collectives import WAITING_AFTER_S
from .decisions import BUSY_CORES, Verdict, busy
from .stepprogress import Phase, StepProgress

#: a step in its layers may go this long without a layer finishing before it is judged stalled, at
#: least: a loaded box deschedules a worker, a new batch shape builds its kernels on first use
STALL_FLOOR_S = 10.0

#: ... and at least this many times the longest gap between two layers seen in the run so far
STALL_MULTIPLE = 4.0


def stall_window_s(pace_s: float, floor_s: float | None = None) -> float:
    """How long a step in its layers may go without advancing before it is judged stalled: at least
    ``floor_s`` (the guard's ``hang_s``; None: ``STALL_FLOOR_S``), and ``STALL_MULTIPLE`` times the
    longest gap its run's pace expects of it (a layer slower than ``hang_s`` is still work)."""
    return max(STALL_FLOOR_S if floor_s is None else floor_s, STALL_MULTIPLE * pace_s)


class RankState(enum.Enum):
    """What a rank was found doing, each with the words the evidence says it in."""

    COMPUTING = "computing"
    SPINNING = "spinning"
    IDLE_IN_STEP = "idle inside its step"
    WAITING = "waiting for a peer rank inside its step (a collective waits for the rank that computes)"
    IDLE_BETWEEN = "idle between steps"
    BUSY_OUTSIDE = "busy, but not in a model step"
    GONE = "gone"

    @property
    def computes(self) -> bool:
        return self is RankState.COMPUTING


@dataclass(frozen=True)
class RankEvidence:
    """One rank at one moment, on the judge's clock (``now``)."""

    label: str  # how the evidence names it: ``VLLM::Worker``, ``TP1``, ``node 1 TP1``
    alive: bool
    cores: float  # CPU use over ``span_s``, in cores (1.0 = one core flat out)
    span_s: float
    #: a step is open (its step record, or its progress, says so)
    in_step: bool
    #: its step's progress (None: it keeps none — no layer hook, an older plugin)
    progress: StepProgress | None = None
    #: how long it has sat in one collective (None: in none, or it keeps no mark)
    in_collective_s: float | None = None
    #: why it is gone, in words (``DEAD`` evidence: "exited", "no progress for 2.1 s")
    gone_why: str = "exited"
    threshold: float = BUSY_CORES  # the share of a core that counts as busy

    @property
    def busy(self) -> bool:
        return busy(self.cores, self.span_s, self.threshold)

    @property
    def cpu_words(self) -> str:
        return f"{self.cores * 100:.0f} % CPU"


@dataclass(frozen=True)
class Judgement:
    """One rank's verdict, what it was doing, and why."""

    evidence: RankEvidence
    verdict: Verdict
    state: RankState
    reason: str  # the evidence in one phrase: "spinning: 100 % CPU, no layer finished for 42.0 s, ..."
    #: when it last showed work (its last advance, or ``now`` when its CPU says it computes), else None
    active_at: float | None = None
    #: how long its step's forward pass has still to run at its pace so far (None: not known)
    ends_in_s: float | None = None


def judge_rank(ev: RankEvidence, now: float, window_s: float | None = None) -> Judgement:
    """One rank's verdict by the rules above; ``window_s`` replaces the stall window's floor (the
    guard passes its ``hang_s``)."""
    if not ev.alive:
        return Judgement(ev, Verdict.DEAD, RankState.GONE, f"gone ({ev.gone_why})")
    if not ev.in_step:
        state = RankState.BUSY_OUTSIDE if ev.busy else RankState.IDLE_BETWEEN
        return Judgement(ev, Verdict.HUNG, state, f"{state.value} ({ev.cpu_words})")
    if ev.in_collective_s is not None and ev.in_collective_s >= WAITING_AFTER_S:
        return Judgement(ev, Verdict.HUNG, RankState.WAITING,
                         f"waiting in a collective for {ev.in_collective_s:.1f} s ({ev.cpu_words})")
    p = ev.progress
    if p is not None and p.phase is Phase.FORWARD and not p.forward_done:
        return _in_layers(ev, p, now, stall_window_s(p.pace_s, window_s))
    doing = p.where() if p is not None else "in its step"
    if ev.busy:
        return Judgement(ev, Verdict.SLOW, RankState.COMPUTING, f"computing, {doing} ({ev.cpu_words})", now)
    return Judgement(ev, Verdict.HUNG, RankState.IDLE_IN_STEP, f"idle, {doing} ({ev.cpu_words})")


def _in_layers(ev: RankEvidence, p: StepProgress, now: float, window_s: float) -> Judgement:
    """Computing needs both: a layer finished within the window, and the CPU to finish the next."""
    stalled = p.stalled_s(now)
    ends = p.ends_in_s(now)
    if stalled < window_s and ev.busy:
        until = f"; ends in ~{ends:.0f} s" if ends is not None else ""
        reason = (f"computing: {p.where()} after {now - p.began:.1f} s, advanced {stalled:.1f} s ago "
                  f"({ev.cpu_words}){until}")
        return Judgement(ev, Verdict.SLOW, RankState.COMPUTING, reason, p.advanced, ends)
    state = RankState.SPINNING if ev.busy else RankState.IDLE_IN_STEP
    word = "spinning" if ev.busy else "idle"
    last = f"last layer {p.finished_layers} of {p.layers}" if p.layers else f"{p.finished_layers} layers done"
    reason = f"{word}: {ev.cpu_words}, no layer finished for {stalled:.1f} s, {last}"
    return Judgement(ev, Verdict.HUNG, state, reason, p.advanced)


@dataclass(frozen=True)
class EngineJudgement:
    """Every rank's judgement and the engine's verdict."""

    verdict: Verdict
    ranks: tuple[Judgement, ...]

    @property
    def active_at(self) -> float | None:
        """The last moment any rank showed work."""
        return max((j.active_at for j in self.ranks if j.active_at is not None), default=None)

    def busiest(self) -> Judgement | None:
        """The rank the evidence should name: one that computes (the busiest), else the rank that
        stopped the step (spinning, idle, gone), else the first."""
        computing = [j for j in self.ranks if j.state.computes]
        if computing:
            return max(computing, key=lambda j: j.evidence.cores)
        for state in (RankState.GONE, RankState.SPINNING, RankState.IDLE_IN_STEP):
            found = next((j for j in self.ranks if j.state is state), None)
            if found is not None:
                return found
        return self.ranks[0] if self.ranks else None


def judge_ranks(
    evidence: Sequence[RankEvidence], now: float, window_s: float | None = None
) -> EngineJudgement:
    """Every rank by ``judge_rank``, and the engine's verdict across them (``combine``)."""
    return combine([judge_rank(ev, now, window_s) for ev in evidence])


def combine(judgements: Sequence[Judgement]) -> EngineJudgement:
    """The engine's verdict across its ranks' judgements (each made at its own moment): a gone rank
    is a genuine death; else a computing one is ``SLOW`` and a rank idle inside its step waits for it."""
    found = list(judgements)
    verdicts = {j.verdict for j in found}
    if Verdict.DEAD in verdicts:
        return EngineJudgement(Verdict.DEAD, tuple(found))
    if Verdict.SLOW in verdicts:
        found = [_waits_for_a_peer(j) for j in found]
        return EngineJudgement(Verdict.SLOW, tuple(found))
    return EngineJudgement(Verdict.HUNG, tuple(found))


def _waits_for_a_peer(j: Judgement) -> Judgement:
    """A rank idle inside its step while a peer computes waits for it in a collective (tensor-parallel
    ranks meet at every all-reduce): it is not hung."""
    if j.state is RankState.IDLE_IN_STEP and j.evidence.progress is None:
        return replace(j, state=RankState.WAITING, reason=f"waiting for a peer rank ({j.evidence.cpu_words})")
    return j
