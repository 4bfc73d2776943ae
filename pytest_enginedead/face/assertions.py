"""``assert_no_false_death``: fail a test when an engine is declared dead while busy.

Works with anything that has ``pids`` (``Watchable``).  An ``Inspectable`` engine
(``EngineHandle``) adds the worker's step record, the deadline, the policy and the
worker's stack to the evidence.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import pytest

from .. import compat
from ..contract.dumps import DeadlineStack
from ..contract.steps import StepTime
from ..harness import stacks
from ..harness.liveness import LivenessSettings, ProcessEvidence, Sampler, Verdict, classify, overall
from ..harness.stacks import Where, innermost_frames


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


@runtime_checkable
class Inspectable(Protocol):
    """An engine that can show its worker's step record, stack and deadline."""

    liveness_settings: LivenessSettings

    @property
    def pids(self) -> Sequence[int]: ...

    @property
    def worker_pids(self) -> Sequence[int]: ...

    def running_step(self, pid: int) -> StepTime | None: ...

    def has_record(self, pid: int) -> bool: ...

    def deadline_stack(self, pid: int, step: StepTime, wait: bool = True) -> DeadlineStack | None: ...

    def capture_stack(self, pid: int) -> str | None: ...

    def step_times_since_start(self) -> list[StepTime]: ...

    def death_facts(self) -> dict[str, Any]: ...


#: The active pytest run's liveness options, for engines that carry none of their own.
_run_settings: ContextVar[LivenessSettings] = ContextVar(
    "enginedead_liveness", default=LivenessSettings()
)


@contextlib.contextmanager
def run_settings(settings: LivenessSettings) -> Iterator[None]:
    """Make ``settings`` the default of ``assert_no_false_death`` while the block runs."""
    token = _run_settings.set(settings)
    try:
        yield
    finally:
        _run_settings.reset(token)


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
                }
                for e in self.judged.values()
            ],
            "stack": self.stack,
            "where": self.where.to_dict() if self.where else None,
            **self.facts,
        }

    def message(self) -> str:
        """The failure text: what happened, the evidence, what to change."""
        lines = [
            f"false engine death: vLLM raised {self.error} while its worker was still "
            f"computing ({self.elapsed_s:.1f} s after the call began)."
        ]
        for pid, ev in self.judged.items():
            lines.append(f"  process:    {ev.describe()}")
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
        f = self.facts
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
        if self.where:
            lines.append(f"  where:      {self.where.describe()}")
        if self.stack:
            lines.append("  worker stack (innermost first):")
            lines.extend("    " + ln for ln in innermost_frames(self.stack))
        cap = f.get("guard_cap_s")
        if cap is not None:
            lines.append(
                f"  what to change: the guard's cap ({cap:g} s) is shorter than one step of this batch. "
                "Give the guard a policy whose cap covers it (ENGINEDEAD_GUARD_POLICY, or "
                "enginedead_guard(policy=...)), or size it with `enginedead calibrate`."
            )
            return "\n".join(lines)
        setting = (
            f"`export {compat.DEADLINE_ENV}={compat.deadline_env_value(allowed)}`"
            if allowed is not None else f"a larger {compat.DEADLINE_ENV}"
        )
        lines.append(
            "  what to change: the deadline is shorter than one step of this batch. Set "
            f"{setting} before the engine starts, or size it with `enginedead calibrate`."
        )
        return "\n".join(lines)


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


def judge(
    engine: Watchable, sampler: Sampler, started: float, error: str, settings: LivenessSettings
) -> Finding:
    """Decide SLOW / HUNG / DEAD from the evidence as it stands right now."""
    t0 = time.monotonic()
    inspectable = engine if isinstance(engine, Inspectable) else None
    evidence = sampler.evidence(fresh=True)
    workers = [p for p in (inspectable.worker_pids if inspectable else ()) if p in evidence]
    judged = {pid: evidence[pid] for pid in (workers or evidence)}
    steps: dict[int, StepTime] = {}
    at_deadline: dict[int, str] = {}
    verdicts = []
    for pid, ev in list(judged.items()):
        v = classify(ev, settings.threshold)
        if inspectable is not None and inspectable.has_record(pid):
            running = inspectable.running_step(pid)
            step = running if v is Verdict.SLOW else None
            then = None if step is not None else as_of_the_deadline(inspectable, sampler, pid)
            if then is not None:
                judged[pid], step = then
                v = classify(then[0], settings.threshold)
                at_deadline[pid] = (
                    "the worker was gone (vLLM stops its workers once it declares the engine dead)"
                    if not ev.alive else "it sat idle in its step" if running is not None
                    else "its step had ended"
                )
            elif step is None and v is Verdict.SLOW:
                v = Verdict.HUNG  # busy, but not in a model step
            if v is Verdict.SLOW and step is not None:
                steps[pid] = step
        verdicts.append(v)
    finding = Finding(overall(verdicts), error, t0 - started, judged, settings, steps,
                      at_deadline=at_deadline)
    finding.verdict_s = time.monotonic() - t0  # the verdict; the evidence below takes longer
    if inspectable is not None:
        if finding.false_death:  # a genuine death propagates without waiting for a stack
            pid, step = next(iter(steps.items()), (next(iter(judged)), None))
            finding.stack, finding.where = where_it_was(inspectable, pid, step)
        summary = step_summary(inspectable.step_times_since_start())
        facts = {**inspectable.death_facts(), "step_summary": summary}
        finding.facts = {k: v for k, v in facts.items() if v not in (None, "")}
    return finding


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
    dump = engine.deadline_stack(pid, step, wait=False)
    then = sampler.evidence_at(pid, dump.at) if dump is not None else None
    if then is None or not then.alive:
        return None
    return then, step


def where_it_was(engine: Inspectable, pid: int, step: StepTime | None) -> tuple[str | None, Where | None]:
    """The worker's stack and where it was: its own dump at the deadline of ``step``, else now.

    The worker dumps its stack itself when a step reaches the deadline in force, so the
    evidence is where the step was when vLLM gave up, even if it ended a moment later.
    """
    dump = engine.deadline_stack(pid, step) if step is not None else None
    if dump is not None:
        how = f"the worker's own stack at the deadline (step {dump.step} {dump.phase}, {dump.ran_s:.2f} s in)"
        if dump.samples:
            how += f", and {len(dump.samples)} samples of the step until then"
        return dump.text, stacks.where(dump.text, how, dump.samples)
    text = engine.capture_stack(pid)
    if text is None:
        return None, None
    return text, stacks.where(text, "a stack taken after the death (the worker wrote none at the deadline)")


@contextmanager
def assert_no_false_death(
    engine: Watchable,
    *,
    errors: type[BaseException] | tuple[type[BaseException], ...] = (),
    threshold: float | None = None,
    interval_s: float | None = None,
) -> Iterator[None]:
    """Fail the test if the engine is declared dead while its worker is computing.

    ``with assert_no_false_death(engine): engine.generate()``.  vLLM's engine-death
    errors are recognised in every release; ``errors`` adds your own.  A death while
    the worker is ``SLOW`` fails the test with the evidence; a genuine death
    (``HUNG``, ``DEAD``) lets the original exception propagate unchanged.
    """
    __tracebackhide__ = True
    settings = engine.liveness_settings if isinstance(engine, Inspectable) else _run_settings.get()
    if threshold is not None:
        settings = replace(settings, threshold=threshold)
    if interval_s is not None:
        settings = replace(settings, interval_s=interval_s)
    sampler = Sampler(list(engine.pids), settings.interval_s, settings.window_s).start()
    started = time.monotonic()
    try:
        yield
    except BaseException as exc:
        extra = errors if isinstance(errors, tuple) else (errors,)
        if isinstance(engine, JudgesErrors):
            died = engine.is_engine_death(exc)
        else:
            died = compat.is_engine_death(exc)
        if not (died or (extra and isinstance(exc, extra))):
            raise
        finding = judge(engine, sampler, started, type(exc).__name__, settings)
        if isinstance(engine, NotesDeaths):
            engine.note_death(finding.to_dict())
        if not finding.false_death:
            raise
        message = finding.message()
    else:
        return
    finally:
        sampler.stop()
    # "from None": the report shows our evidence, not vLLM's exception chain
    raise pytest.fail.Exception(message, pytrace=False) from None
