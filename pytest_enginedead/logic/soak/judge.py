"""The guard's decisions held against the soak's schedule: every window judged from data.

A *window* is the time one scheduled fault was in force (from the moment the soak told
the code inside vLLM, to the moment its effect was over).  The guard's decisions are
its ``GuardEvent`` values (``action`` and ``verdict``, never the prose); the steps are the
workers' own record; the exits are the serving process's, as the supervisor saw them.

* a ``slow`` window: every step past vLLM's deadline (by more than two of the guard's
  looks) was waited on (``WAIT`` with ``SLOW``), nothing ended, the server lived —
  otherwise it is a **false end**;
* a ``hang`` or ``spin`` window: the guard ended it (``END`` with ``HUNG``) within ``hang_s`` +
  two looks of the stuck step's last progress — counted from the step's start, plus one healthy
  step for the layers it went through before it stopped (and one more at several ranks, which
  the peers compute before they wait) — otherwise a **missed hang** (a spin included);
* a ``kill`` window: no ``END``/``CAP`` (the dead worker is vLLM's monitor's);
* every other ``END``/``CAP``, anywhere but in a hang or spin window, is a false end too.

A death (the server exited, not stopped by the soak) is *genuine* in a hang, spin or kill
window and a **false death** anywhere else; the requests that failed from its window's
start until the restarted server answered are lost to it.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...contract.decisions import GuardAction, Verdict
from ...contract.guardfiles import GuardEvent
from ...contract.steps import StepTime
from .schedule import FATAL, KILL_FAULT, SLOW_FAULT, STUCK

#: the guard looks at the worker every 0.25 s (``vllm_plugin.guard.PROBE_EVERY_S``): two looks
TWO_LOOKS_S = 0.5

#: a serving process exits within ~5 s of its engine's death: an exit this long after a
#: window closed still belongs to it
DEATH_GRACE_S = 15.0

class Outcome(enum.Enum):
    """How a client request ended."""

    #: served
    OK = "ok"
    #: closed by its client on purpose (a disconnect fault)
    DISCONNECTED = "disconnected"
    #: cut short by the soak's own stop: neither served nor lost
    CUT = "cut by the end of the run"
    #: failed: its ``failure`` says how
    FAILED = "failed"


class Cause(enum.Enum):
    """Whose fault a server's death was."""

    #: a hang or a kill window's: the death the fault should bring
    GENUINE = "genuine"
    #: anything else: the engine died of nothing that should end it
    FALSE = "false"


@dataclass(frozen=True)
class Window:
    """One scheduled fault in force, on one server incarnation."""

    kind: str
    label: str  # "faults[3] hang on rank 1"
    start: float  # time.monotonic() when the soak told the engine
    end: float  # when its effect was over (steps done, server gone, requests answered)
    incarnation: int


@dataclass(frozen=True)
class Exit:
    """One server incarnation's end as the supervisor saw it."""

    incarnation: int
    t: float
    code: int | None
    by_us: bool  # the soak stopped it (end of run, Ctrl-C, a hang it had to end itself)
    back_at: float | None = None  # when the next incarnation answered /health (None: none)


@dataclass(frozen=True)
class Request:
    """One client request and how it ended (``failure``: how a failed one failed, in words)."""

    kind: str
    start: float
    end: float
    outcome: Outcome
    failure: str | None = None

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.FAILED

    @classmethod
    def failing(cls, kind: str, start: float, end: float, failure: str) -> Request:
        return cls(kind, start, end, Outcome.FAILED, failure)


@dataclass
class WindowResult:
    window: Window
    ok: bool
    why: str
    decisions: Counter[GuardAction]
    steps_past_deadline: int = 0
    ended_after_s: float | None = None  # a hang: from the hung step's start to the guard's END
    events: tuple[GuardEvent, ...] = ()  # the guard's decisions in the window

    def to_dict(self, t0: float) -> dict[str, Any]:
        out: dict[str, Any] = {
            "fault": self.window.label, "kind": self.window.kind, "at_s": round(self.window.start - t0, 1),
            "lasted_s": round(self.window.end - self.window.start, 1), "ok": self.ok, "why": self.why,
            "decisions": action_counts(self.decisions),
        }
        if self.window.kind == SLOW_FAULT:
            out["steps_past_deadline"] = self.steps_past_deadline
        if self.ended_after_s is not None:
            out["ended_after_s"] = round(self.ended_after_s, 2)
        if self.window.kind in FATAL or not self.ok:  # the evidence, decision by decision
            out["events"] = [{"at_s": round(e.t - t0, 2), "action": e.action.value, "verdict": e.verdict.name,
                              "step": e.step, "batch": e.batch, "waited_s": e.waited_s, "rank": e.rank,
                              "ranks": e.ranks} for e in self.events[:20]]
        return out


@dataclass(frozen=True)
class Limits:
    """What the judge holds the guard to."""

    deadline_s: float
    hang_s: float
    guarded: bool
    ranks: int = 1
    #: the run's median step: what a stuck step computes before it stops, and a peer before it waits
    healthy_step_s: float = 0.0

    @property
    def hang_within_s(self) -> float:
        """From the stuck step's start: the step went through its first layers before it stopped,
        and the guard's clock runs from its last layer (up to one healthy step); at several ranks
        the peers compute their part first (one more)."""
        steps = 2 if self.ranks > 1 else 1
        return self.hang_s + TWO_LOOKS_S + steps * self.healthy_step_s


def _in(events: Iterable[GuardEvent], w: Window) -> list[GuardEvent]:
    return [e for e in events if w.start <= e.t <= w.end]


def _tally(events: Iterable[GuardEvent]) -> Counter[GuardAction]:
    return Counter(e.action for e in events)


def action_counts(decisions: Counter[GuardAction]) -> dict[str, int]:
    """The tally as the soak's JSON writes it: each action by its value."""
    return {a.value: n for a, n in decisions.items()}


def past_deadline(steps: Iterable[StepTime], w: Window, limits: Limits, now: float) -> int:
    """Steps that began in the window and ran past the deadline by two looks or more (the
    guard must have looked at them there); the most on any one worker (ranks record each step)."""
    per_pid: Counter[int] = Counter()
    for s in steps:
        if not w.start <= s.started <= w.end:
            continue
        ran = s.seconds if s.seconds is not None else now - s.started
        if ran >= limits.deadline_s + TWO_LOOKS_S:
            per_pid[s.pid] += 1
    return max(per_pid.values(), default=0)


def judge_slow(w: Window, events: list[GuardEvent], steps: Sequence[StepTime], died: Exit | None,
               limits: Limits, now: float) -> WindowResult:
    past = past_deadline(steps, w, limits, now)
    ends = [e for e in events if e.action.ends]
    waits = [e for e in events if e.action is GuardAction.WAIT and e.verdict is Verdict.SLOW]
    if not limits.guarded:
        why = (f"the server died (exit {died.code}) at {past} step(s) past the deadline" if died
               else f"lived through {past} step(s) past the deadline")
        return WindowResult(w, died is None, why, _tally(events), past)
    if ends:
        e = ends[0]
        why = f"FALSE END: the guard decided {e.action.value} ({e.verdict}) at step {e.step}, computing"
        return WindowResult(w, False, why, _tally(events), past)
    if died:
        return WindowResult(w, False, f"FALSE DEATH: the server exited {died.code} in a slow window",
                            _tally(events), past)
    if past and not waits:
        return WindowResult(w, False, f"MISSED: {past} step(s) ran past the deadline and the guard never "
                                      "decided SLOW/wait", _tally(events), past)
    if not past:
        return WindowResult(w, True, "no step ran past the deadline (not exercised)", _tally(events), past)
    return WindowResult(w, True, f"{past} step(s) past the deadline: waited {len(waits)} time(s), none ended",
                        _tally(events), past)


def hung_step(steps: Sequence[StepTime], w: Window) -> StepTime | None:
    """The step the hang stopped: the first that began in the window and never ended."""
    hung = [s for s in steps if s.seconds is None and w.start <= s.started <= w.end]
    return min(hung, key=lambda s: s.started, default=None)


def judge_hang(w: Window, events: list[GuardEvent], steps: Sequence[StepTime], died: Exit | None,
               limits: Limits) -> WindowResult:
    stuck = hung_step(steps, w)
    ends = [e for e in events if e.action is GuardAction.END and e.verdict is Verdict.HUNG]
    if not limits.guarded:
        why = f"vLLM's deadline ended it (exit {died.code})" if died else "the server lived on (hung)"
        return WindowResult(w, True, why, _tally(events))
    if stuck is None:
        return WindowResult(w, False, "MISSED: no step hung in the window (the fault did not reach a step)",
                            _tally(events))
    if not ends:
        return WindowResult(w, False, f"MISSED: the worker hung at step {stuck.step} and the guard never "
                                      "ended the wait", _tally(events))
    after = ends[0].t - stuck.started
    if after > limits.hang_within_s:
        return WindowResult(w, False, f"MISSED: ended {after:.2f} s after the hang began, later than "
                                      f"hang_s + two looks after its last layer "
                                      f"({limits.hang_within_s:.2f} s)",
                            _tally(events), ended_after_s=after)
    return WindowResult(w, True, f"HUNG, ended {after:.2f} s after the hang began (hang_s "
                                 f"{limits.hang_s:g} s)", _tally(events), ended_after_s=after)


def judge_other(w: Window, events: list[GuardEvent], died: Exit | None, limits: Limits) -> WindowResult:
    """A kill (the engine dies; no END/CAP of the guard's) or a load fault (nothing ends, nothing dies)."""
    ends = [e for e in events if e.action.ends]
    if limits.guarded and ends:
        e = ends[0]
        return WindowResult(w, False, f"FALSE END: the guard decided {e.action.value} ({e.verdict}) at step "
                                      f"{e.step}", _tally(events))
    if w.kind == KILL_FAULT:
        monitor = sum(1 for e in events if e.action is GuardAction.MONITOR)
        how = "left to vLLM's worker monitor" + (f" ({monitor} DEAD decision)" if monitor else "")
        return WindowResult(w, died is not None, f"{how}; exit {died.code if died else 'none'}",
                            _tally(events))
    if died:
        return WindowResult(w, False, f"FALSE DEATH: the server exited {died.code} during {w.kind}",
                            _tally(events))
    return WindowResult(w, True, "served through it", _tally(events))


def judge_window(w: Window, events: Sequence[GuardEvent], steps: Sequence[StepTime], died: Exit | None,
                 limits: Limits, now: float) -> WindowResult:
    """One window; ``died``: the server's death that belongs to it (``death_cause``), if any."""
    inside = _in(events, w)
    if w.kind == SLOW_FAULT:
        result = judge_slow(w, inside, steps, died, limits, now)
    elif w.kind in STUCK:
        result = judge_hang(w, inside, steps, died, limits)
    else:
        result = judge_other(w, inside, died, limits)
    result.events = tuple(inside)
    return result


def _false_end(r: WindowResult, limits: Limits) -> bool:
    """A guarded window the guard got wrong: it ended (or let die) what computed, or never saw it."""
    if not limits.guarded or r.window.kind in STUCK:
        return False
    if r.window.kind == KILL_FAULT:
        return any(a.ends for a in r.decisions)
    return not r.ok


def death_cause(x: Exit, windows: Sequence[Window]) -> tuple[Cause, Window | None]:
    """(its cause, its window) for a server's death: the last window of that server that began
    before it, if the death came within ``DEATH_GRACE_S`` of its close."""
    for w in reversed(windows):
        if w.incarnation == x.incarnation and w.start <= x.t:
            if x.t <= w.end + DEATH_GRACE_S:
                return (Cause.GENUINE if w.kind in FATAL else Cause.FALSE), w
            break
    return Cause.FALSE, None


@dataclass(frozen=True)
class Death:
    """A server's death the soak did not cause, judged against the windows."""

    #: seconds into the run, and the exit status
    at_s: float
    exit: int | None
    cause: Cause
    #: its window's label (None: no window owns it)
    window: str | None
    requests_lost: int
    #: how long until the restarted server answered (None: it never did)
    down_s: float | None

    def to_dict(self) -> dict[str, Any]:
        """As the soak's ``--json`` holds it."""
        return {"at_s": self.at_s, "exit": self.exit, "cause": self.cause.value, "window": self.window,
                "requests_lost": self.requests_lost, "down_s": self.down_s}


@dataclass
class Judgement:
    windows: list[WindowResult]
    false_ends: int
    missed_hangs: int | None
    lost_to_false_death: int
    lost_to_genuine_death: int
    failures: Counter[str]  # each failure's cause
    deaths: list[Death]
    decisions: Counter[GuardAction]
    stray_ends: int  # END/CAP outside every window


def deaths_of(exits: Sequence[Exit], windows: Sequence[Window], failed: Sequence[Request], t0: float,
              now: float) -> list[Death]:
    """The server's deaths the soak did not cause, each with the failed requests it cost: those that
    ended from its window's start (or ``DEATH_GRACE_S`` before it) until the server was back, each
    counted once."""
    deaths: list[Death] = []
    claimed: set[int] = set()
    for x in exits:
        if x.by_us:
            continue
        cause, w = death_cause(x, windows)
        since = w.start if w is not None else x.t - DEATH_GRACE_S
        until = x.back_at if x.back_at is not None else now
        lost = [i for i, r in enumerate(failed) if i not in claimed and since <= r.end <= until]
        claimed.update(lost)
        deaths.append(Death(round(x.t - t0, 1), x.code, cause, w.label if w else None, len(lost),
                            round(until - x.t, 1) if x.back_at is not None else None))
    return deaths


def owned_exits(exits: Sequence[Exit], windows: Sequence[Window]) -> dict[int, Exit]:
    """Per window (by ``id``): the first exit the soak did not cause that falls to it."""
    owned: dict[int, Exit] = {}
    for x in exits:
        w = death_cause(x, windows)[1] if not x.by_us else None
        if w is not None:
            owned.setdefault(id(w), x)
    return owned


def stray_ends(events: Sequence[GuardEvent], windows: Sequence[Window]) -> list[GuardEvent]:
    """The guard's ``END``/``CAP`` outside every window."""
    return [e for e in events if e.action.ends and not any(w.start <= e.t <= w.end for w in windows)]


def _false_ends(results: Sequence[WindowResult], stray: Sequence[GuardEvent], limits: Limits) -> int:
    """The windows judged a false end, plus (guarded) each stray end."""
    return sum(1 for r in results if _false_end(r, limits)) + (len(stray) if limits.guarded else 0)


def _missed_hangs(results: Sequence[WindowResult], limits: Limits) -> int | None:
    """The hang and spin windows the guard did not end; None for a run without the guard."""
    if not limits.guarded:
        return None
    return sum(1 for r in results if r.window.kind in STUCK and not r.ok)


def _lost_to(deaths: Sequence[Death], cause: Cause) -> int:
    """The requests the deaths of this cause cost."""
    return sum(d.requests_lost for d in deaths if d.cause is cause)


def judge(windows: Sequence[Window], events: Sequence[GuardEvent], steps: Sequence[StepTime],
          exits: Sequence[Exit], requests: Sequence[Request], limits: Limits, t0: float,
          now: float) -> Judgement:
    """The run judged: each window, the deaths and the requests they cost."""
    owned = owned_exits(exits, windows)
    results = [judge_window(w, events, steps, owned.get(id(w)), limits, now) for w in windows]
    stray = stray_ends(events, windows)
    failed = [r for r in requests if r.failed]
    deaths = deaths_of(exits, windows, failed, t0, now)
    return Judgement(
        windows=results, false_ends=_false_ends(results, stray, limits),
        missed_hangs=_missed_hangs(results, limits),
        lost_to_false_death=_lost_to(deaths, Cause.FALSE),
        lost_to_genuine_death=_lost_to(deaths, Cause.GENUINE),
        failures=Counter(r.failure or "" for r in failed), deaths=deaths, decisions=_tally(events),
        stray_ends=len(stray),
    )
