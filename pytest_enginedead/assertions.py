"""``assert_no_false_death``: fail a test when an engine is declared dead while busy.

Works with any object that has ``pids``.  An ``EngineHandle`` adds the worker's
step record, the deadline, the policy and the worker's stack to the evidence.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from . import compat
from .liveness import (
    DEFAULT_BUSY_THRESHOLD,
    DEFAULT_INTERVAL_S,
    DEFAULT_WINDOW_S,
    ProcessEvidence,
    Sampler,
    Verdict,
    classify,
    overall,
)


@dataclass(frozen=True)
class Settings:
    """How busy counts as busy, and how often to look."""

    threshold: float = DEFAULT_BUSY_THRESHOLD
    interval_s: float = DEFAULT_INTERVAL_S
    window_s: float = DEFAULT_WINDOW_S


_settings: list[Settings] = [Settings()]


def push_settings(settings: Settings) -> None:
    """The plugin's options become the defaults while its session runs."""
    _settings.append(settings)


def pop_settings() -> None:
    if len(_settings) > 1:
        _settings.pop()


@dataclass
class Finding:
    """The verdict on one engine death, with the evidence behind it."""

    verdict: Verdict
    error: str
    elapsed_s: float
    judged: dict[int, ProcessEvidence]
    settings: Settings
    steps: dict[int, Any] = field(default_factory=dict)  # pid -> running StepTime
    stack: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    verdict_s: float = 0.0  # how long judging took

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
                }
                for e in self.judged.values()
            ],
            "stack": self.stack,
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
        f = self.facts
        if f.get("timeout_s") is not None:
            lines.append(f"  deadline:   {f['timeout_s']:g} s ({f.get('timeout_source', 'unknown')})")
        if f.get("step_summary"):
            lines.append(f"  steps:      {f['step_summary']}")
        if f.get("policy_timeout_s") is not None:
            lines.append(
                f"  policy:     {f.get('policy', 'the active policy')} allows "
                f"{f['policy_timeout_s']:.0f} s at batch {f.get('batch_size')} on CPU"
            )
        if self.stack:
            lines.append("  worker stack (innermost first):")
            lines.extend("    " + ln for ln in _innermost(self.stack))
        allowed = f.get("policy_timeout_s")
        setting = (
            f"`export {compat.DEADLINE_ENV}={compat.deadline_env_value(allowed)}`"
            if allowed is not None else f"a larger {compat.DEADLINE_ENV}"
        )
        lines.append(
            "  what to change: the deadline is shorter than one step of this batch. Set "
            f"{setting} before the engine starts, or size it with `enginedead calibrate`."
        )
        return "\n".join(lines)


def _step_dict(step: Any) -> dict[str, Any] | None:
    if step is None:
        return None
    return {"step": step.step, "batch_size": step.batch_size}


def _innermost(stack: str, frames: int = 10) -> list[str]:
    """The main thread's innermost frames from a faulthandler dump.

    The worker writes ``main-thread 0x…`` before each dump; without it, the first
    thread listed is shown.
    """
    lines = stack.splitlines()
    main = next((ln.split()[1] for ln in lines if ln.startswith("main-thread ")), None)
    blocks: list[list[str]] = []
    for line in lines:
        if line.startswith(("Thread ", "Current thread ")):
            blocks.append([line.strip().rstrip(":")])
        elif blocks and line.strip().startswith("File "):
            blocks[-1].append(line.strip())
    if not blocks:
        return []
    chosen = next((b for b in blocks if main and main in b[0]), blocks[0])
    return chosen[: frames + 1]


def _step_summary(engine: Any) -> str:
    """Finished steps so far: count, p50 and the longest, with its batch."""
    steps_fn = getattr(engine, "step_times", None)
    if not callable(steps_fn):
        return ""
    done = [s for s in steps_fn() if s.seconds is not None]
    if not done:
        return "no step had finished"
    worst = max(done, key=lambda s: s.seconds)
    return (
        f"{len(done)} finished so far, p50 {statistics.median(s.seconds for s in done):.3f} s, "
        f"max {worst.seconds:.3f} s at batch {worst.batch_size}"
    )


def judge(engine: Any, sampler: Sampler, started: float, error: str, settings: Settings) -> Finding:
    """Decide SLOW / HUNG / DEAD from the evidence as it stands right now."""
    t0 = time.monotonic()
    evidence = sampler.evidence(fresh=True)
    workers = [p for p in (getattr(engine, "worker_pids", None) or []) if p in evidence]
    judged = {pid: evidence[pid] for pid in (workers or evidence)}
    running_step = getattr(engine, "running_step", None)
    has_record = getattr(engine, "has_record", None)
    steps: dict[int, Any] = {}
    verdicts = []
    for pid, ev in judged.items():
        v = classify(ev, settings.threshold)
        if v is Verdict.SLOW and callable(has_record) and has_record(pid):
            step = running_step(pid) if callable(running_step) else None
            if step is None:
                v = Verdict.HUNG  # busy, but not in a model step
            else:
                steps[pid] = step
        verdicts.append(v)
    finding = Finding(overall(verdicts), error, t0 - started, judged, settings, steps)
    if finding.false_death:
        capture = getattr(engine, "capture_stack", None)
        if callable(capture):
            pid = next(iter(steps), next(iter(judged)))
            finding.stack = capture(pid)
    summary = _step_summary(engine)
    finding.facts = {
        k: v
        for k, v in {
            "batch_size": getattr(engine, "batch_size", None),
            "timeout_s": getattr(engine, "timeout_s", None),
            "timeout_source": getattr(engine, "timeout_source", None),
            "policy": getattr(engine, "policy_name", None),
            "policy_timeout_s": getattr(engine, "policy_timeout_s", None),
            "step_summary": summary,
        }.items()
        if v not in (None, "")
    }
    finding.verdict_s = time.monotonic() - t0
    return finding


@contextmanager
def assert_no_false_death(
    engine: Any,
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
    settings = _settings[-1]
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
        if not (compat.is_engine_death(exc) or (extra and isinstance(exc, extra))):
            raise
        finding = judge(engine, sampler, started, type(exc).__name__, settings)
        note = getattr(engine, "note_death", None)
        if callable(note):
            note(finding.to_dict())
        if not finding.false_death:
            raise
        message = finding.message()
    else:
        return
    finally:
        sampler.stop()
    # "from None": the report shows our evidence, not vLLM's exception chain
    raise pytest.fail.Exception(message, pytrace=False) from None
