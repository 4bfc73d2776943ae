"""The verdict on an engine death: SLOW, HUNG or DEAD, from the evidence as it stands.

Evidence, strongest first: the worker's own step record and its stack at the deadline,
its CPU time sampled in the background, whether the process exists.  Anything with
``pids`` can be judged (``Watchable``); an ``Inspectable`` engine adds its records.
"""

from __future__ import annotations

import shlex
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..compat import versions
from ..contract.decisions import Verdict
from ..contract.dumps import DeadlineStack
from ..contract.judge import Judgement, RankState, combine
from ..contract.stepprogress import StepProgress
from ..contract.steps import StepTime
from ..logic.planning.nodes import node_label
from ..logic.planning.ranks import rank_label
from ..process.remote import RemoteLook
from . import slowpaths, stacks
from .liveness import LivenessSettings, ProcessEvidence, Sampler
from .rankjudge import judge_workers
from .remoteverdict import computing, remote_dicts, remote_lines, remote_looks, remote_where
from .stacks import Where, innermost_frames


class Watchable(Protocol):
    """The least an engine must give: the pids of its processes."""

    @property
    def pids(self) -> Sequence[int]: ...


@runtime_checkable
class NotesDeaths(Protocol):
    """An engine that keeps the verdicts on its deaths."""

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

    def in_collective_s(self, pid: int, now: float) -> float | None: ...

    def step_progress(self, pid: int) -> StepProgress | None: ...

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

    def death_facts(self) -> dict[str, Any]: ...


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
    facts: dict[str, Any] = field(default_factory=dict)
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
    #: pid -> the judge's word on it (``contract.judge``): what it was doing, and why
    judgements: dict[int, Judgement] = field(default_factory=dict)

    @property
    def false_death(self) -> bool:
        return self.verdict is Verdict.SLOW

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.name,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 3),
            "verdict_s": round(self.verdict_s, 4),
            "processes": [
                {
                    "pid": e.pid,
                    "title": e.title,
                    "alive": e.alive,
                    "status": e.status,
                    "cpu_cores": round(e.cpu_cores, 3),
                    "window_s": round(e.window_s, 3),
                    "step": _step_dict(self.steps.get(e.pid)),
                    "judged_at_deadline": e.pid in self.at_deadline,
                    **({"rank": self.ranks[e.pid][0], "rank_state": self.ranks[e.pid][1]}
                       if e.pid in self.ranks else {}),
                }
                for e in self.judged.values()
            ],
            **({"remote_ranks": remote_dicts(self.remote)} if self.remote else {}),
            "stack": self.stack,
            "where": self.where.to_dict() if self.where else None,
            **({"slow_paths": self.slow_paths} if self.slow_paths else {}),
            **self.facts,
        }

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
        if pid in self.judgements:
            lines.append(f"  judged:     {self.judgements[pid].reason}")
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
            busy = [rank for rank, state in self.ranks.values() if state == RankState.COMPUTING.value]
            rank = (f"rank {self.where_rank}: " if self.where_rank else f"rank {busy[0]}: " if busy else "")
            lines.append(f"  where:      {rank}{self.where.describe()}")
        lines.extend(f"  slow path:  {path}" for path in self.slow_paths)
        if self.stack:
            lines.append("  worker stack (innermost first):")
            lines.extend("    " + ln for ln in innermost_frames(self.stack))
        return lines


def _fact_lines(f: dict[str, Any]) -> list[str]:
    """The engine's facts at the death: its deadline, steps so far, clients, guard, and what
    the policy allows."""
    lines = []
    if f.get("deadline_s") is not None:
        lines.append(f"  deadline:   {f['deadline_s']:g} s ({f.get('deadline_source', 'unknown')})")
    if f.get("step_summary"):
        lines.append(f"  steps:      {f['step_summary']}")
    if f.get("clients"):
        lines.append(f"  clients:    {f['clients']}")
    if f.get("guard"):
        lines.append(f"  guard:      {f['guard']}")
    allowed = f.get("policy_deadline_s")
    if allowed is not None:
        lines.append(
            f"  policy:     {f.get('policy') or 'the active policy'} allows "
            f"{allowed:.0f} s at batch {f.get('batch_size')} on CPU"
        )
    return lines


def _what_to_change(f: dict[str, Any]) -> str:
    """The fix: a guard's cap that covers the step where the guard's cap ended it, else a
    deadline that does (the policy's, when one is known)."""
    model = f" --model {shlex.quote(str(f['model']))}" if f.get("model") else ""
    calibrate = f"`enginedead calibrate{model}`"  # the engine's model: a complete line
    cap = f.get("guard_cap_s")
    if cap is not None:
        return (
            f"the guard's cap ({cap:g} s) is shorter than one step of this batch. "
            "Give the guard a policy whose cap covers it (ENGINEDEAD_GUARD_POLICY, or "
            f"enginedead_guard(policy=...)), or size it with {calibrate}."
        )
    allowed = f.get("policy_deadline_s")
    setting = (
        f"`export {versions.DEADLINE_ENV}={versions.deadline_env_value(allowed)}`"
        if allowed is not None else f"a larger {versions.DEADLINE_ENV}"
    )
    return (
        "the deadline is shorter than one step of this batch. Set "
        f"{setting} before the engine starts, or size it with {calibrate}."
    )


def _step_dict(step: StepTime | None) -> dict[str, Any] | None:
    if step is None:
        return None
    return {"step": step.step, "batch_size": step.batch_size}


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
    """Decide SLOW / HUNG / DEAD from the evidence as it stands right now (the one judge's rules,
    ``contract.judge``: a worker in its layers computes while its step advances)."""
    t0 = time.monotonic()
    inspectable = engine if isinstance(engine, Inspectable) else None
    evidence = sampler.evidence(fresh=True)
    workers = [p for p in (inspectable.evidence.worker_pids if inspectable else ()) if p in evidence]
    judged = {pid: evidence[pid] for pid in (workers or evidence)}
    found = judge_workers(inspectable, sampler, judged, settings.threshold)
    remote = remote_looks(inspectable)  # the other nodes' ranks: their progress, never /proc
    whole = combine([*found.judgements.values(), *(lk.judgement for lk in remote)])
    local = dict(zip(found.judgements, whole.ranks, strict=False))  # as combined (a peer waits)
    finding = Finding(whole.verdict, error, t0 - started, judged, settings, found.steps,
                      at_deadline=found.at_deadline, remote=remote, judgements=local)
    if inspectable is not None and (len(workers) > 1 or remote):  # several ranks: what each was doing
        node = 0 if remote else None
        finding.ranks = {pid: (_rank_of(judged[pid], pid, node), j.state.value) for pid, j in local.items()}
    finding.verdict_s = time.monotonic() - t0  # the verdict; the evidence below takes longer
    if inspectable is not None:
        _add_evidence(finding, inspectable)
    return finding


def _rank_of(ev: ProcessEvidence, pid: int, node: int | None) -> str:
    """A worker's rank as the evidence names it: from its title, with its node on several."""
    rank = rank_label(ev.title) or f"pid {pid}"
    return node_label(node, rank) if node is not None else rank


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
    summary = step_summary(engine.step_times_since_start())
    facts = {**engine.death_facts(), "step_summary": summary}
    finding.facts = {k: v for k, v in facts.items() if v not in (None, "")}


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
