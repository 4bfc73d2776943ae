"""The report's rows: one per engine test (``TestRow``), one per engine started (``EngineRow``).

The terminal summary, the JSON report, junitxml, ``enginedead check`` and ``enginedead merge``
read these values, so they cannot disagree.  As JSON (the report file, the xdist wire) a row
is written by its ``to_dict`` and read back by its ``from_dict`` alone.  The handles and
engines the rows are made from are seen through Protocols: nothing here starts, stops or
asks an engine anything.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ...contract.decisions import Verdict
from ...contract.guardfiles import GuardEvent
from ...contract.steps import StepTime, summarize
from ..planning.engines import DeadlineAndFaults, EngineSpec
from .deaths import DeathRecord, death_counts


class Phase(Protocol):
    """One phase's report as pytest makes it (``pytest.TestReport``)."""

    @property
    def when(self) -> str: ...

    @property
    def outcome(self) -> str: ...

    @property
    def passed(self) -> bool: ...

    @property
    def skipped(self) -> bool: ...


class Judged(Protocol):
    """A verdict on a death (``harness.judging.verdict.Finding``)."""

    def record(self) -> DeathRecord: ...


class Observed(Protocol):
    """A test's handle on its engine (``pytest_plugin.handles.Handle``)."""

    @property
    def batch_size(self) -> int: ...

    @property
    def instructions(self) -> DeadlineAndFaults: ...

    @property
    def findings(self) -> Sequence[Judged]: ...

    @property
    def spec(self) -> EngineSpec: ...

    @property
    def timeout_s(self) -> float: ...

    def step_times_since_start(self) -> list[StepTime]: ...

    def guard_events(self) -> list[GuardEvent]: ...


class Records(Protocol):
    """An engine's records (``harness.judging.evidence.RunEvidence``)."""

    def steps(self) -> list[StepTime]: ...

    def guard_events(self) -> list[GuardEvent]: ...


class ProcessId(Protocol):
    """A process pinned by pid and creation time (``process.pinned.ProcRef``)."""

    @property
    def pid(self) -> int: ...

    @property
    def create_time(self) -> float: ...


class Described(Protocol):
    """Something the summary names in one phrase (``harness.engines.cleanup.Survivor``)."""

    def describe(self) -> str: ...


class Started(Protocol):
    """An engine the run started (``harness.engines.base.EngineBase``)."""

    @property
    def kind(self) -> str: ...

    @property
    def spec(self) -> EngineSpec: ...

    @property
    def instructions(self) -> list[DeadlineAndFaults]: ...

    @property
    def findings(self) -> Sequence[Judged]: ...

    @property
    def start_s(self) -> float | None: ...

    @property
    def evidence(self) -> Records: ...

    @property
    def shm(self) -> set[str]: ...

    @property
    def procs(self) -> Sequence[ProcessId]: ...

    @property
    def node_procs(self) -> Sequence[ProcessId]:
        """On several nodes: the headless nodes' processes (each node's namespace seen from this one)."""
        ...

    @property
    def node_shm(self) -> set[str]: ...


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _f(x: Any) -> float | None:
    return None if x is None else float(x)


def _count(data: Mapping[str, Any], key: str) -> int:
    """A count a report row holds under ``key``; 0 where it holds none (an older report)."""
    return int(data.get(key) or 0)


def _listed(data: Mapping[str, Any], key: str) -> Iterable[Any]:
    """The list a report row holds under ``key``; empty where it holds none."""
    return data.get(key) or ()


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """The strings a report row lists under ``key``, as a tuple; empty where it lists none."""
    return tuple(str(s) for s in _listed(data, key))


@dataclass(frozen=True)
class TestRow:
    """One phase of one engine test (the call, or a setup/teardown that did not pass)."""

    __test__ = False  # not a pytest test class

    nodeid: str
    when: str
    outcome: str
    batch_size: int
    #: the deadline in force, and where it came from
    deadline_s: float
    deadline_source: str
    engine: str
    steps: int
    step_p50_s: float | None
    step_max_s: float | None
    #: the longest step had not ended: ``step_max_s`` is how long it had run
    step_max_running: bool
    deaths: tuple[DeathRecord, ...] = ()
    #: the guard's decisions while the test ran (empty without the guard)
    guard_events: tuple[GuardEvent, ...] = ()
    #: a false death here breaks a promise: the deadline was the policy's, or the guard was on
    promised: bool = False

    @property
    def verdict(self) -> Verdict | None:
        """The last death's verdict; None when the test saw none."""
        return self.deaths[-1].verdict if self.deaths else None

    @property
    def false_under_policy(self) -> bool:
        """A false death where one was promised not to happen (``promised``)."""
        return self.verdict is not None and self.verdict.false_death and self.promised

    @classmethod
    def observed(cls, nodeid: str, rep: Phase, handle: Observed) -> TestRow:
        """The row of one phase, from the test's handle on its engine."""
        stats = summarize(handle.step_times_since_start(), now=time.monotonic())
        return cls(
            nodeid=nodeid, when=rep.when, outcome=rep.outcome, batch_size=handle.batch_size,
            deadline_s=handle.timeout_s, deadline_source=handle.instructions.deadline_source,
            engine=f"{handle.spec.label()}; {handle.instructions.describe()}",
            steps=stats.steps, step_p50_s=_r(stats.p50_s), step_max_s=_r(stats.max_s),
            step_max_running=stats.max_running, deaths=tuple(f.record() for f in handle.findings),
            guard_events=tuple(handle.guard_events()),
            promised=handle.instructions.from_policy or handle.spec.guard is not None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The row as the report file holds it (``timeout_s``: schema v1's name for the deadline)."""
        return {
            "nodeid": self.nodeid, "when": self.when, "outcome": self.outcome, "batch_size": self.batch_size,
            "timeout_s": self.deadline_s, "deadline_s": self.deadline_s,
            "deadline_source": self.deadline_source,
            "engine": self.engine, "steps": self.steps, "step_p50_s": self.step_p50_s,
            "step_max_s": self.step_max_s, "step_max_running": self.step_max_running,
            "verdict": None if self.verdict is None else self.verdict.name,
            "deaths": [d.to_dict() for d in self.deaths],
            "guard_events": [e.to_dict() for e in self.guard_events], "promised": self.promised,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TestRow:
        """A row as ``to_dict`` wrote it, or as an earlier release did (``promised`` and
        ``deadline_s`` may be absent); ``KeyError``/``ValueError`` for one that is not a row."""
        deadline = data.get("deadline_s", data["timeout_s"])
        return cls(
            nodeid=str(data["nodeid"]), when=str(data.get("when", "call")), outcome=str(data["outcome"]),
            batch_size=int(data["batch_size"]), deadline_s=float(deadline),
            deadline_source=str(data.get("deadline_source", "")), engine=str(data.get("engine", "")),
            steps=int(data.get("steps") or 0), step_p50_s=_f(data.get("step_p50_s")),
            step_max_s=_f(data.get("step_max_s")), step_max_running=bool(data.get("step_max_running")),
            deaths=tuple(DeathRecord.from_dict(d) for d in data.get("deaths") or ()),
            guard_events=tuple(GuardEvent.from_dict(e) for e in data.get("guard_events") or ()),
            promised=bool(data.get("promised")),
        )


@dataclass(frozen=True)
class EngineRow:
    """One engine this run started (``worker``: the xdist worker that ran it)."""

    label: str
    #: "engine" (offline vllm.LLM) or "server" (the OpenAI API server)
    kind: str
    batch_size: int
    #: the deadline of the last test that used it; ``deadlines``: every one, in order
    deadline_s: float
    deadlines: tuple[float, ...]
    deadline_source: str
    injection: str
    guard: str | None
    model: str
    start_s: float | None
    #: started because the engine before it, for the same configuration, had died
    restart: bool
    steps: int
    step_p50_s: float | None
    step_max_s: float | None
    #: the finished steps' seconds, summed
    step_total_s: float
    headroom: float | None
    false_deaths: int
    genuine_deaths: int
    guard_events: tuple[GuardEvent, ...]
    tests: tuple[str, ...]
    #: (pid, creation time) of every process it ran, its nodes' included
    pids: tuple[tuple[int, float], ...]
    shm: tuple[str, ...]
    #: its processes that outlived SIGKILL, each in a phrase (none, unless the kernel could not take them)
    survived_kill: tuple[str, ...] = ()
    worker: str | None = None

    @classmethod
    def of(cls, engine: Started, tests: Sequence[str], restart: bool = False,
           survivors: Sequence[Described] = ()) -> EngineRow:
        """One engine as the summary, the report and junitxml show it."""
        steps = engine.evidence.steps()
        stats = summarize(steps)
        used = engine.instructions
        deadline = used[-1].deadline_whole_s if used else 0.0
        false, genuine = death_counts([f.record() for f in engine.findings])
        return cls(
            label=engine.spec.label(), kind=engine.kind, batch_size=engine.spec.max_num_seqs,
            deadline_s=deadline, deadlines=tuple(i.deadline_whole_s for i in used),
            deadline_source="; ".join(dict.fromkeys(i.deadline_source for i in used)),
            injection="; ".join(dict.fromkeys(i.injection.describe() for i in used)) or "none",
            guard=engine.spec.guard.describe() if engine.spec.guard else None, model=engine.spec.model,
            start_s=None if engine.start_s is None else round(engine.start_s, 2), restart=restart,
            steps=stats.steps, step_p50_s=_r(stats.p50_s), step_max_s=_r(stats.max_s),
            step_total_s=round(sum(s.seconds for s in steps if s.seconds is not None), 3),
            headroom=_r(deadline / stats.max_s) if stats.max_s and deadline else None,
            false_deaths=false, genuine_deaths=genuine,
            guard_events=tuple(engine.evidence.guard_events()), tests=tuple(tests),
            pids=tuple((r.pid, r.create_time) for r in [*engine.procs, *engine.node_procs]),
            shm=tuple(sorted(engine.shm | engine.node_shm)),
            survived_kill=tuple(s.describe() for s in survivors),
        )

    def to_dict(self) -> dict[str, Any]:
        """The row as the report file holds it."""
        out: dict[str, Any] = {
            "label": self.label, "kind": self.kind, "batch_size": self.batch_size,
            "deadline_s": self.deadline_s, "deadlines": list(self.deadlines),
            "deadline_source": self.deadline_source, "injection": self.injection, "guard": self.guard,
            "model": self.model, "start_s": self.start_s, "restart": self.restart, "steps": self.steps,
            "step_p50_s": self.step_p50_s, "step_max_s": self.step_max_s, "step_total_s": self.step_total_s,
            "headroom": self.headroom, "false_deaths": self.false_deaths,
            "genuine_deaths": self.genuine_deaths,
            "guard_events": [e.to_dict() for e in self.guard_events], "tests": list(self.tests),
            "pids": [{"pid": pid, "create_time": t} for pid, t in self.pids], "shm": list(self.shm),
            "survived_kill": list(self.survived_kill),
        }
        if self.worker is not None:
            out["worker"] = self.worker
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineRow:
        """A row as ``to_dict`` wrote it."""
        return cls(
            label=str(data["label"]), kind=str(data.get("kind", "engine")),
            batch_size=int(data["batch_size"]),
            deadline_s=float(data["deadline_s"]),
            deadlines=tuple(float(d) for d in data.get("deadlines") or [data["deadline_s"]]),
            deadline_source=str(data.get("deadline_source", "")),
            injection=str(data.get("injection", "none")),
            guard=data.get("guard"), model=str(data.get("model", "")), start_s=_f(data.get("start_s")),
            restart=bool(data.get("restart")), steps=_count(data, "steps"),
            step_p50_s=_f(data.get("step_p50_s")), step_max_s=_f(data.get("step_max_s")),
            step_total_s=float(data.get("step_total_s") or 0.0), headroom=_f(data.get("headroom")),
            false_deaths=_count(data, "false_deaths"), genuine_deaths=_count(data, "genuine_deaths"),
            guard_events=tuple(GuardEvent.from_dict(e) for e in _listed(data, "guard_events")),
            tests=_strings(data, "tests"),
            pids=tuple((int(p["pid"]), float(p["create_time"])) for p in _listed(data, "pids")),
            shm=_strings(data, "shm"), survived_kill=_strings(data, "survived_kill"),
            worker=data.get("worker"),
        )
