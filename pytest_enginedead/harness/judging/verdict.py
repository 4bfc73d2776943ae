"""The verdict on an engine death: SLOW, HUNG or DEAD, from the evidence as it stands.

Evidence, strongest first: the worker's own step record and its stack at the deadline,
its CPU time sampled in the background, whether the process exists.  Anything with
``pids`` can be judged (``Watchable``); an ``Inspectable`` engine adds its records.
"""

from __future__ import annotations

import shlex
import statistics
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from ...contract.decisions import Verdict, overall
from ...contract.dumps import DeadlineStack
from ...contract.steps import StepTime
from ...logic import releases
from ...logic.planning.nodes import node_label
from ...logic.planning.ranks import rank_label
from ...logic.reporting.deaths import DeathFacts, DeathRecord, JudgedProcess, StepRef
from ...logic.reporting.where import Where
from ...process.remote import RemoteLook
from . import slowpaths, stacks
from .liveness import LivenessSettings, ProcessEvidence, Sampler, classify
from .remote import computing, remote_lines, remote_looks, remote_records, remote_where
from .stacks import innermost_frames


class Watchable(Protocol):
    """The least an engine must give: the pids of its processes."""

    @property
    def pids(self) -> Sequence[int]: ...


@runtime_checkable
class NotesFindings(Protocol):
    """An engine that keeps the verdicts on its deaths as values (the plugin's handles)."""

    def note_finding(self, finding: Finding) -> None: ...


@runtime_checkable
class NotesDeaths(Protocol):
    """Your own engine that keeps the verdicts on its deaths, as the report writes them."""

    def note_death(self, finding: dict[str, Any]) -> None: ...


@runtime_checkable
class JudgesErrors(Protocol):
    """An engine that tells which of its errors mean its engine died (a server's clients)."""

    def is_engine_death(self, exc: BaseException) -> bool: ...


class Evidence(Protocol):
    """An engine's records and stacks (``evidence.RunEvidence``)."""

    @property
    def worker_pids(self) -> Sequence[int]: ...

    def running_step(self, pid: int) -> StepTime | None: ...

    def has_record(self, pid: int) -> bool: ...

    def waiting_for_a_peer(self, pid: int) -> bool: ...

    def deadline_stack(
        self, pid: int, step: StepTime, deadline_s: float, wait_s: float | None = 0.5
    ) -> DeadlineStack | None: ...

    def capture_stack(self, pid: int, timeout_s: float = 0.4) -> str | None: ...


@runtime_checkable
class Inspectable(Protocol):
    """An engine that can show its worker's step record, stack and deadline (a handle)."""

    liveness_settings: LivenessSettings

    @property
    def pids(self) -> Sequence[int]: ...

    @property
    def evidence(self) -> Evidence: ...

    @property
    def timeout_s(self) -> float: ...

    def step_times_since_start(self) -> list[StepTime]: ...

    def death_facts(self) -> DeathFacts: ...


@dataclass
class Finding:
    """The verdict on one engine death, with the evidence behind it."""

    verdict: Verdict
    error: str
    elapsed_s: float
    judged: dict[int, ProcessEvidence]
    settings: LivenessSettings
    steps: dict[int, StepTime] = field(default_factory=dict)  # pid -> its running step
    stack: str | None = None
    #: where the worker was, read from ``stack``
    where: Where | None = None
    facts: DeathFacts = field(default_factory=DeathFacts)
    verdict_s: float = 0.0  # how long judging took
    #: workers judged as of their own dump at the deadline (by the verdict, their step had
    #: ended or vLLM had stopped them): pid -> what they were doing at the verdict
    at_deadline: dict[int, str] = field(default_factory=dict)
    #: with several ranks: pid -> (its rank, e.g. "TP1", what it was doing), in words
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)
    #: slow paths the configuration sent the step down (``slowpaths``), one line each with the fix
    slow_paths: list[str] = field(default_factory=list)
    #: on several nodes: the other nodes' ranks, judged from the progress they publish
    remote: list[RemoteLook] = field(default_factory=list)
    #: the rank ``where`` was read from, when it is another node's (``node 1 TP1``)
    where_rank: str | None = None

    @property
    def false_death(self) -> bool:
        return self.verdict is Verdict.SLOW

    def record(self) -> DeathRecord:
        """The finding as the run keeps it: what the report, the summary and ``check`` read."""
        return DeathRecord(
            self.verdict, self.error, self.elapsed_s, self.verdict_s,
            tuple(self._judged(e) for e in self.judged.values()), remote_records(self.remote),
            self.stack, self.where, tuple(self.slow_paths), self.facts,
        )

    def to_dict(self) -> dict[str, Any]:
        """The finding as the report file writes it (``DeathRecord.to_dict``)."""
        return self.record().to_dict()

    def _judged(self, e: ProcessEvidence) -> JudgedProcess:
        step = self.steps.get(e.pid)
        rank, state = self.ranks.get(e.pid, (None, None))
        return JudgedProcess(
            e.pid, e.title, e.alive, e.status, e.cpu_cores, e.window_s,
            None if step is None else StepRef(step.step, step.batch_size), e.pid in self.at_deadline,
            rank, state,
        )

    def message(self) -> str:
        """The failure text: what happened, the evidence, what to change."""
        lines = [
            f"false engine death: vLLM raised {self.error} while its worker was still "
            f"computing ({self.elapsed_s:.1f} s after the call began)."
        ]
        for pid, ev in self.judged.items():
            lines.extend(self._process_lines(pid, ev))
        lines.extend(remote_lines(self.remote))
        lines.extend(_fact_lines(self.facts))
        lines.extend(self._stack_lines())
        lines.append(f"  what to change: {_what_to_change(self.facts)}")
        return "\n".join(lines)

    def _process_lines(self, pid: int, ev: ProcessEvidence) -> list[str]:
        """One judged process: its evidence, its rank, its running step, whether it was judged
        as of the deadline."""
        lines = [f"  process:    {ev.describe()}"]
        if pid in self.ranks:
            lines.append(f"  rank:       {self.ranks[pid][0]}: {self.ranks[pid][1]}")
        step = self.steps.get(pid)
        if step is not None:
            ran = ev.at - step.started
            lines.append(
                f"  step:       step {step.step}, batch {step.batch_size}, had run "
                f"{ran:.1f} s and was still running"
            )
        if pid in self.at_deadline:
            lines.append(
                f"  afterwards: judged as of the deadline, from its own stack then; by the verdict "
                f"{self.at_deadline[pid]}"
            )
        return lines

    def _stack_lines(self) -> list[str]:
        """Where the worker was (on the computing rank, with several), the slow paths it ran
        in, and its innermost frames."""
        lines = []
        if self.where:
            busy = [rank for rank, state in self.ranks.values() if state == COMPUTING]
            rank = (f"rank {self.where_rank}: " if self.where_rank else f"rank {busy[0]}: " if busy else "")
            lines.append(f"  where:      {rank}{self.where.describe()}")
        lines.extend(f"  slow path:  {path}" for path in self.slow_paths)
        if self.stack:
            lines.append("  worker stack (innermost first):")
            lines.extend("    " + ln for ln in innermost_frames(self.stack))
        return lines


def _fact_lines(f: DeathFacts) -> list[str]:
    """The engine's facts at the death: its deadline, steps so far, clients, guard, and what
    the policy allows."""
    lines = []
    if f.deadline_s is not None:
        lines.append(f"  deadline:   {f.deadline_s:g} s ({f.deadline_source or 'unknown'})")
    if f.step_summary:
        lines.append(f"  steps:      {f.step_summary}")
    if f.clients:
        lines.append(f"  clients:    {f.clients}")
    if f.guard:
        lines.append(f"  guard:      {f.guard}")
    if f.policy_deadline_s is not None:
        lines.append(
            f"  policy:     {f.policy or 'the active policy'} allows "
            f"{f.policy_deadline_s:.0f} s at batch {f.batch_size} on CPU"
        )
    return lines


def _what_to_change(f: DeathFacts) -> str:
    """The fix: a guard's cap that covers the step where the guard's cap ended it, else a
    deadline that does (the policy's, when one is known)."""
    model = f" --model {shlex.quote(f.model)}" if f.model else ""
    calibrate = f"`enginedead calibrate{model}`"  # the engine's model: a complete line
    cap = f.guard_cap_s
    if cap is not None:
        return (
            f"the guard's cap ({cap:g} s) is shorter than one step of this batch. "
            "Give the guard a policy whose cap covers it (ENGINEDEAD_GUARD_POLICY, or "
            f"enginedead_guard(policy=...)), or size it with {calibrate}."
        )
    allowed = f.policy_deadline_s
    setting = (
        f"`export {releases.DEADLINE_ENV}={releases.deadline_env_value(allowed)}`"
        if allowed is not None else f"a larger {releases.DEADLINE_ENV}"
    )
    return (
        "the deadline is shorter than one step of this batch. Set "
        f"{setting} before the engine starts, or size it with {calibrate}."
    )


def step_summary(steps: Sequence[StepTime]) -> str:
    """Finished steps so far: count, p50 and the longest, with its batch."""
    done = [(s.seconds, s) for s in steps if s.seconds is not None]
    if not done:
        return "no step had finished"
    worst_s, worst = max(done, key=lambda d: d[0])
    return (
        f"{len(done)} finished so far, p50 {statistics.median(d[0] for d in done):.3f} s, "
        f"max {worst_s:.3f} s at batch {worst.batch_size}"
    )


def judge_death(
    engine: Watchable, sampler: Sampler, started: float, error: str, settings: LivenessSettings
) -> Finding:
    """Decide SLOW / HUNG / DEAD from the evidence as it stands right now."""
    t0 = time.monotonic()
    inspectable = engine if isinstance(engine, Inspectable) else None
    evidence = sampler.evidence(fresh=True)
    workers = [p for p in (inspectable.evidence.worker_pids if inspectable else ()) if p in evidence]
    judged = {pid: evidence[pid] for pid in (workers or evidence)}
    found = _Judgements()
    for pid, ev in list(judged.items()):
        v = classify(ev, settings.threshold)
        if inspectable is not None and inspectable.evidence.has_record(pid):
            v = _judge_by_step(inspectable, sampler, pid, v, judged, settings.threshold, found)
        found.verdicts.append(v)
    remote = remote_looks(inspectable)  # the other nodes' ranks: their progress, never /proc
    finding = Finding(overall([*found.verdicts, *(lk.verdict for lk in remote)]), error, t0 - started, judged,
                      settings, found.steps, at_deadline=found.at_deadline, remote=remote)
    if inspectable is not None and (len(workers) > 1 or remote):  # several ranks: what each was doing
        verdicts = dict(zip(judged, found.verdicts, strict=True))
        finding.ranks = rank_states(judged, verdicts, found.in_step, found.waiting,
                                    node=0 if remote else None, peer_computes=bool(computing(remote)))
    finding.verdict_s = time.monotonic() - t0  # the verdict; the evidence below takes longer
    if inspectable is not None:
        _add_evidence(finding, inspectable)
    return finding


@dataclass
class _Judgements:
    """What judging the processes found, in the order they were judged."""

    verdicts: list[Verdict] = field(default_factory=list)
    #: pid -> the step a SLOW worker was computing
    steps: dict[int, StepTime] = field(default_factory=dict)
    #: pid -> what a worker judged as of the deadline was doing at the verdict
    at_deadline: dict[int, str] = field(default_factory=dict)
    #: the workers inside a step (now, or at the deadline)
    in_step: set[int] = field(default_factory=set)
    #: the workers inside a collective, waiting for a peer rank (their mark says so)
    waiting: set[int] = field(default_factory=set)


def _judge_by_step(
    engine: Inspectable, sampler: Sampler, pid: int, verdict: Verdict,
    judged: dict[int, ProcessEvidence], threshold: float, found: _Judgements,
) -> Verdict:
    """The verdict on a worker that keeps a step record, given ``verdict`` from its CPU now.

    Busy inside a model step is SLOW.  Any other worker (its step ended, it sat idle, it is
    gone, or it is busy outside a step) is judged as of the deadline when its own dump then
    proves it was in the step: its evidence in ``judged`` becomes that.  Failing that, busy
    outside a step is HUNG.
    """
    ev = judged[pid]
    running = engine.evidence.running_step(pid)
    if running is not None:
        found.in_step.add(pid)
        if verdict is Verdict.SLOW and engine.evidence.waiting_for_a_peer(pid):
            found.waiting.add(pid)  # its CPU is a spin in a collective: a wait, not work
            return Verdict.HUNG
    step = running if verdict is Verdict.SLOW else None
    then = None if step is not None else as_of_the_deadline(engine, sampler, pid)
    if then is not None:
        found.in_step.add(pid)
        judged[pid], step = then
        verdict = classify(then[0], threshold)
        found.at_deadline[pid] = (
            "the worker was gone (vLLM stops its workers once it declares the engine dead)"
            if not ev.alive else "it sat idle in its step" if running is not None
            else "its step had ended"
        )
    elif step is None and verdict is Verdict.SLOW:
        verdict = Verdict.HUNG  # busy, but not in a model step
    if verdict is Verdict.SLOW and step is not None:
        found.steps[pid] = step
    return verdict


def _add_evidence(finding: Finding, engine: Inspectable) -> None:
    """After the verdict: a false death's stack, where it was and its slow paths (a genuine
    death propagates without waiting for a stack), and the engine's facts for every death."""
    if finding.false_death:
        if not finding.steps and computing(finding.remote):  # another node's rank computed: its stack
            look = computing(finding.remote)[0]
            finding.where_rank = look.label
            finding.stack, finding.where, paths = remote_where(engine, look)
        else:
            pid, step = next(iter(finding.steps.items()), (next(iter(finding.judged)), None))
            finding.stack, finding.where, paths = where_it_was(engine, pid, step)
        finding.slow_paths = paths + slowpaths.oversubscribed(finding.judged)
    finding.facts = replace(engine.death_facts(), step_summary=step_summary(engine.step_times_since_start()))


#: what a rank was doing, as the verdict says it
COMPUTING = "computing"
WAITING = "waiting for a peer rank inside its step (a collective waits for the rank that computes)"


def rank_states(
    judged: dict[int, ProcessEvidence], verdicts: dict[int, Verdict], in_step: set[int],
    waiting: Collection[int] = (), node: int | None = None, peer_computes: bool = False,
) -> dict[int, tuple[str, str]]:
    """Per worker of a multi-rank engine: its rank (from its title) and what it was doing.

    A rank idle inside its step while a peer computes is waiting for it in a collective
    (tensor parallel ranks meet at every all-reduce): not hung.  So is one whose collective
    mark says it has sat in one (``waiting``), whatever its CPU: on CPU the wait spins.  On
    several nodes the ranks are named with their ``node``, and a peer on another node that
    computes (``peer_computes``) counts as well.
    """
    someone_computes = peer_computes or any(v is Verdict.SLOW for v in verdicts.values())
    out = {}
    for pid, ev in judged.items():
        rank = rank_label(ev.title) or f"pid {pid}"
        rank = node_label(node, rank) if node is not None else rank
        if not ev.alive:
            state = "gone"
        elif pid in waiting:
            state = WAITING
        elif verdicts[pid] is Verdict.SLOW:
            state = COMPUTING
        elif pid in in_step:
            state = WAITING if someone_computes else "idle inside its step"
        else:
            state = "idle between steps"
        out[pid] = (rank, state)
    return out


def as_of_the_deadline(
    engine: Inspectable, sampler: Sampler, pid: int
) -> tuple[ProcessEvidence, StepTime] | None:
    """The worker as it was when its last step reached the deadline, if it did.

    A server's clients hear of the death only after vLLM has declared it, and by then
    the step may have ended or vLLM may have stopped the worker: "gone" or "idle" then
    is not what it was doing when vLLM gave up.  The worker's own dump at the deadline
    proves it was in the step; the samples up to that moment say whether it was
    computing.  A worker that died or hung before the deadline wrote no such dump.
    """
    mine = [s for s in engine.step_times_since_start() if s.pid == pid]
    if not mine:
        return None
    step = max(mine, key=lambda s: s.started)
    dump = engine.evidence.deadline_stack(pid, step, engine.timeout_s, None)
    then = sampler.evidence_at(pid, dump.at) if dump is not None else None
    if then is None or not then.alive:
        return None
    return then, step


def where_it_was(
    engine: Inspectable, pid: int, step: StepTime | None
) -> tuple[str | None, Where | None, list[str]]:
    """The worker's stack, where it was, and the slow paths it ran in: from its own dump at the
    deadline of ``step``, else a stack taken now.

    The worker dumps its stack itself when a step reaches the deadline in force, so the
    evidence is where the step was when vLLM gave up, even if it ended a moment later.
    """
    dump = engine.evidence.deadline_stack(pid, step, engine.timeout_s) if step is not None else None
    if dump is not None:
        how = f"the worker's own stack at the deadline (step {dump.step} {dump.phase}, {dump.ran_s:.2f} s in)"
        if dump.samples:
            how += f", and {len(dump.samples)} samples of the step until then"
        found = stacks.where(dump.text, how, dump.samples)
        return dump.text, found, slowpaths.in_stacks(dump.text, dump.samples)
    text = engine.evidence.capture_stack(pid)
    if text is None:
        return None, None, []
    return (text, stacks.where(text, "a stack taken after the death (the worker wrote none at the deadline)"),
            slowpaths.in_stacks(text))
