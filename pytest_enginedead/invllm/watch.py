"""One step RPC in flight, watched by the guard: its looks at the ranks, and its decisions.

At each look (every ``PROBE_EVERY_S``, from inside vLLM's reply wait) every rank's evidence goes
to the one judge (``contract.judge``) with the guard's ``hang_s`` as the stall window: a rank in
its layers computes while a layer finished within ``hang_s``; one that stopped advancing is hung,
idle or spinning at a whole core; outside the layers (preparing the step, sampling) its CPU
decides.  The hang's clock runs from the last moment any rank showed work (its last advance, or a
look that found it computing).  At vLLM's deadline the guard says once what it found — with the
layer the step is in and when, at its pace so far, it ends — and goes on waiting (``SLOW``, up to
its cap) or warns (``HUNG``); once no rank has shown work for ``hang_s`` it ends the wait.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..contract.decisions import GuardAction, Verdict
from ..contract.guardfiles import GuardEvent
from ..contract.judge import EngineJudgement, Judgement, judge_ranks
from ..process import reading
from ..process.remote import RemoteLook
from .ranks import Who, local_evidence, names

if TYPE_CHECKING:
    from .guard import Core

#: The wait loop runs thousands of times a second; the worker is looked at this often.
PROBE_EVERY_S = 0.25

#: A healthy step is over before this: no probe, no cost.
FIRST_PROBE_S = 0.5

logger = logging.getLogger("vllm.enginedead")


class Watch:
    """One step RPC in flight: when it was sent, its deadlines, what its ranks did since."""

    def __init__(
        self, core: Core, method: str, step: int, batch: int, deadline_s: float, cap_s: float
    ) -> None:
        self.core = core
        self.method = method
        self.step = step
        self.batch = batch
        self.deadline_s = deadline_s
        self.cap_s = cap_s
        self.sent = time.monotonic()
        self._next_probe = self.sent + FIRST_PROBE_S
        self._trail = reading.CpuTrail()  # the workers' CPU seconds over the last window
        self._sizes: tuple[int, ...] | None = None  # their step records' sizes at the last look
        self._remote_steps: tuple[tuple[int, bool], ...] = ()  # remote ranks' (step, running) last seen
        self._busy_at = self.sent  # the last time a rank showed work
        self._judged: EngineJudgement | None = None  # the last look's judgement
        self._who: list[Who] = []  # the ranks it judged, in its order
        self._gone: RemoteLook | None = None  # a remote rank whose progress stopped arriving
        self._said_deadline = False
        self._said_dead = False
        self._wrote_state = False

    @property
    def hang_s(self) -> float:
        return self.core.guard.hang_s if self.core.guard else math.inf

    def observe(self) -> None:
        """Look at the ranks (rate-limited); raise ``TimeoutError`` when none showed work for hang_s."""
        now = time.monotonic()
        if now < self._next_probe:
            return
        self._next_probe = now + PROBE_EVERY_S
        verdict = self._probe(now)
        self._state(now, verdict)
        if verdict is Verdict.DEAD and self._gone is None:
            if not self._said_dead:
                self._said_dead = True
                self._decide(now, verdict, GuardAction.MONITOR, "left to vLLM's worker monitor", "is gone")
        elif verdict is not Verdict.SLOW and now - self._busy_at >= self.hang_s:
            self._end(now, verdict)
        elif now - self.sent >= self.deadline_s and not self._said_deadline:
            self._said_deadline = True
            self._at_deadline(now, verdict)

    def _end(self, now: float, verdict: Verdict) -> None:
        idle = now - self._busy_at
        why = f"{self._words()}; no rank showed work for {idle:.1f} s"
        if self._gone is not None:
            why = (f"{why}; {self._gone.label} sent no progress for {self._gone.silent_s:.1f} s "
                   "(vLLM's worker monitor cannot see another node)")
        self._decide(now, verdict, GuardAction.END, "ending the wait", why)
        self._state(now, verdict, ended=GuardAction.END)
        raise TimeoutError(f"enginedead guard: {self.method}: no rank showed work for {idle:.1f} s "
                           f"(hang_s {self.hang_s:g} s)")

    def _at_deadline(self, now: float, verdict: Verdict) -> None:
        if verdict is Verdict.SLOW:
            outcome = f"waiting up to {self.cap_s:.0f} s"
            busiest = self._busiest()
            ends = busiest.ends_in_s if busiest is not None else None
            if ends is not None and now - self.sent + ends > self.cap_s:
                outcome += (f"; at its pace it ends after {now - self.sent + ends:.0f} s, past the cap: "
                            "the engine will die at the cap unless the step speeds up")
            self._decide(now, verdict, GuardAction.WAIT, outcome, self._words())
        else:
            idle = now - self._busy_at
            self._decide(now, verdict, GuardAction.WARN,
                         f"ending the wait if no rank shows work {self.hang_s - idle:.0f} s more",
                         f"{self._words()}; no rank showed work for {idle:.1f} s")

    def ms_to_next_look(self) -> int:
        """How long vLLM's wait may sleep before the next look is due (woken late, it would skip one)."""
        return max(1, math.ceil((self._next_probe - time.monotonic()) * 1000))

    def past_cap(self) -> None:
        """vLLM's wait is about to raise at the guard's cap: say so, once."""
        now = time.monotonic()
        verdict = self._probe(now)
        self._decide(now, verdict, GuardAction.CAP, "past the cap: the engine dies as stock vLLM would",
                     f"still {self._words()}")
        self._state(now, verdict, ended=GuardAction.CAP)

    def finish(self) -> None:
        """The step's reply is in (or its wait ended): a probe must not see it running."""
        if self._wrote_state:
            self.core.write_state(None)

    def _probe(self, now: float) -> Verdict:
        """The engine's verdict from every rank's evidence now (``DEAD`` at once if a local worker is
        gone: vLLM's own monitor acts on it)."""
        procs = self.core.worker_procs()
        if not procs or any(not reading.alive(p) for p in procs):
            self._gone = None
            return Verdict.DEAD
        remote = self.core.remote_looks()
        self._gone = next((lk for lk in remote if lk.gone), None)
        steps = tuple((lk.record.step, lk.record.running) for lk in remote)
        moved, self._remote_steps = steps != self._remote_steps, steps
        self._trail.add(now, [reading.cpu_seconds(p) for p in procs])
        sizes, last_sizes = self.core.record_sizes(procs), self._sizes
        self._sizes = sizes
        if last_sizes is None or self._trail.span_s <= 0:
            return Verdict.SLOW  # the first look: no rate yet
        workers = self.core.workers()
        evidence = local_evidence(procs, workers, self._trail, self.core.marks_dir, now)
        self._judged = judge_ranks([*evidence, *(lk.judgement.evidence for lk in remote)], now, self.hang_s)
        self._who = names(workers, remote, self.core.nodes.node if remote else None)
        if sizes != last_sizes or moved:  # a new step or phase in a record: progress
            self._busy_at = now
        active = self._judged.active_at
        if active is not None:
            self._busy_at = max(self._busy_at, active)
        return self._judged.verdict

    def _busiest(self) -> Judgement | None:
        return self._judged.busiest() if self._judged is not None else None

    def _words(self) -> str:
        """What the rank the decision names was found doing (``Judgement.reason``)."""
        busiest = self._busiest()
        return busiest.reason if busiest is not None else "no rate yet (its first look)"

    def _named(self) -> Who:
        """The rank the last look judged: the busiest, or the one that stopped the step."""
        busiest = self._busiest()
        if busiest is not None and self._judged is not None and len(self._who) == len(self._judged.ranks):
            return self._who[self._judged.ranks.index(busiest)]
        workers = self.core.workers()
        return names(workers, [], None)[0] if workers else Who(0, None, None, "VLLM::Worker")

    def _state(self, now: float, verdict: Verdict, ended: GuardAction | None = None) -> None:
        self._wrote_state = True
        who, busiest = self._named(), self._busiest()
        progress = busiest.evidence.progress if busiest is not None else None
        self.core.write_state(replace(
            self.core.state_base(now), in_step=ended is None, method=self.method, step=self.step,
            batch=self.batch, deadline_s=self.deadline_s, cap_s=round(self.cap_s, 3), sent=self.sent,
            busy_at=self._busy_at, verdict=verdict,
            cores=round(busiest.evidence.cores, 3) if busiest is not None else 0.0,
            worker=who.pid, ended=ended, node=who.node,
            silent=self._gone.label if self._gone is not None else None,
            reason=self._words(), layer=progress.finished_layers if progress is not None else 0,
            layers=progress.layers if progress is not None else 0,
            ends_in_s=round(busiest.ends_in_s, 1) if busiest is not None and busiest.ends_in_s is not None
            else None,
        ))

    def _decide(self, now: float, verdict: Verdict, action: GuardAction, outcome: str, state: str) -> None:
        who = self._named()
        ran = now - self.sent
        logger.warning(
            "enginedead guard: %s has run %.1f s (deadline %g s); %s pid %d %s, "
            "step %d batch %d; %s",
            self.method, ran, self.deadline_s, who.name, who.pid, state, self.step, self.batch, outcome,
        )
        self.core.note(GuardEvent(
            self.method, self.step, self.batch, round(ran, 3), self.deadline_s,
            round(self.cap_s, 3), verdict, action, outcome, who.pid, now, who.rank, self.core.rank_count(),
            who.node,
        ))
