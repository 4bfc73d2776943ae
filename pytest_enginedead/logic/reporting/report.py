"""What the run found, as data: per-test and per-engine rows, the JSON report, junitxml properties.

The terminal summary, the JSON report and junitxml read the same rows (``TestRow``,
``EngineRow``), so they cannot disagree.  The handles and engines the rows are made from
are seen through Protocols: nothing here starts, stops or asks an engine anything.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypedDict

from ...contract.decisions import Verdict
from ...contract.guardfiles import GuardEvent
from ...contract.steps import StepTime, summarize
from .. import releases
from ..planning.engines import EngineSpec, Instructions

SCHEMA_VERSION = 1

SCHEMA_PATH = str(Path(__file__).parents[2] / "report.schema.json")

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


class Observed(Protocol):
    """A test's handle on its engine (``face.handles.Handle``)."""

    @property
    def batch_size(self) -> int: ...

    @property
    def instructions(self) -> Instructions: ...

    @property
    def deaths(self) -> list[dict[str, Any]]: ...

    @property
    def spec(self) -> EngineSpec: ...

    @property
    def timeout_s(self) -> float: ...

    def step_times_since_start(self) -> list[StepTime]: ...

    def guard_events(self) -> list[GuardEvent]: ...


class Records(Protocol):
    """An engine's records (``harness.evidence.RunEvidence``)."""

    def steps(self) -> list[StepTime]: ...

    def guard_events(self) -> list[GuardEvent]: ...


class ProcessId(Protocol):
    """A process pinned by pid and creation time (``harness.cleanup.ProcRef``)."""

    @property
    def pid(self) -> int: ...

    @property
    def create_time(self) -> float: ...


class Started(Protocol):
    """An engine the run started (``harness.base.EngineBase``)."""

    @property
    def kind(self) -> str: ...

    @property
    def spec(self) -> EngineSpec: ...

    @property
    def instructions(self) -> list[Instructions]: ...

    @property
    def deaths(self) -> list[dict[str, Any]]: ...

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


class Described(Protocol):
    """Something the summary names in one phrase (``harness.cleanup.Survivor``)."""

    def describe(self) -> str: ...


class StartRecord(Protocol):
    """One start and the tests that used it (``harness.pool.EngineRecord``)."""

    @property
    def engine(self) -> Started: ...

    @property
    def tests(self) -> list[str]: ...

    @property
    def restart(self) -> bool: ...

    @property
    def survivors(self) -> Sequence[Described]: ...


class RunFacts(Protocol):
    """What the report says of the run's settings (``face.options.Settings``)."""

    @property
    def vllm_version(self) -> str | None: ...

    @property
    def policy_name(self) -> str: ...

    @property
    def policy_source(self) -> str: ...

    @property
    def batch_sizes(self) -> tuple[int, ...]: ...



class TestRow(TypedDict):
    """One phase of one engine test (the call, or a setup/teardown that did not pass)."""

    nodeid: str
    when: str
    outcome: str
    batch_size: int
    #: the deadline in force (schema v1's name for it; ``deadline_s`` says the same)
    timeout_s: float
    deadline_s: float
    deadline_source: str
    engine: str
    steps: int
    step_p50_s: float | None
    step_max_s: float | None
    step_max_running: bool
    verdict: str | None
    deaths: list[dict[str, Any]]
    #: the guard's decisions while the test ran (empty without the guard)
    guard_events: list[dict[str, Any]]
    #: a false death here breaks a promise: the deadline was the policy's, or the guard was on
    promised: bool

class EngineRow(TypedDict, total=False):
    """One engine this run started (``worker``: the xdist worker that ran it)."""

    label: str
    kind: str  # "engine" (offline vllm.LLM) or "server" (the OpenAI API server)
    batch_size: int
    #: the deadline of the last test that used it; ``deadlines``: every one, in order
    deadline_s: float
    deadlines: list[float]
    deadline_source: str
    injection: str
    guard: str | None
    #: started because the engine before it, for the same configuration, had died
    restart: bool
    guard_events: list[dict[str, Any]]
    model: str
    start_s: float | None
    steps: int
    step_p50_s: float | None
    step_max_s: float | None
    #: the finished steps' seconds, summed
    step_total_s: float
    headroom: float | None
    false_deaths: int
    genuine_deaths: int
    tests: list[str]
    pids: list[dict[str, float]]
    shm: list[str]
    #: its processes that outlived SIGKILL, each in a phrase (none, unless the kernel could not take them)
    survived_kill: list[str]
    worker: str

@dataclass
class Results:
    """What engine tests found: per-test rows and per-engine rows.

    Filled locally, or, under xdist, merged on the controller from what each worker
    sent (``to_wire``/``absorb``), so there is one table, one file.
    """

    tests: list[TestRow] = field(default_factory=list)
    engines: list[EngineRow] = field(default_factory=list)
    lost_workers: list[str] = field(default_factory=list)
    #: distinct engine configurations the collected tests need
    configurations: int = 0
    #: the shard this run kept (``--enginedead-shard``), as the report says it
    shard: dict[str, Any] | None = None
    #: seconds of tests (setup + call + teardown) with an engine and without one
    test_s: dict[str, float] = field(default_factory=lambda: {"engine": 0.0, "other": 0.0})

    def observe_time(self, uses_engine: bool, seconds: float) -> None:
        kind = "engine" if uses_engine else "other"
        self.test_s[kind] = self.test_s.get(kind, 0.0) + seconds

    def observe(self, nodeid: str, rep: Phase, handle: Observed) -> TestRow | None:
        """Keep the call phase, and setup/teardown phases that did not pass; return the row kept."""
        if rep.when != "call" and (rep.passed or rep.skipped):
            return None
        stats = summarize(handle.step_times_since_start(), now=time.monotonic())
        deaths = list(handle.deaths)
        row = TestRow(
            nodeid=nodeid,
            when=rep.when,
            outcome=rep.outcome,
            batch_size=handle.batch_size,
            timeout_s=handle.timeout_s,
            deadline_s=handle.timeout_s,
            deadline_source=handle.instructions.deadline_source,
            engine=f"{handle.spec.label()}; {handle.instructions.describe()}",
            steps=stats.steps,
            step_p50_s=_r(stats.p50_s),
            step_max_s=_r(stats.max_s),
            step_max_running=stats.max_running,
            verdict=deaths[-1]["verdict"] if deaths else None,
            deaths=deaths,
            guard_events=[e.to_dict() for e in handle.guard_events()],
            promised=handle.instructions.from_policy or handle.spec.guard is not None,
        )
        self.tests.append(row)
        return row

    def add_engines(self, records: Iterable[StartRecord]) -> None:
        """One row per engine this process started, with the tests that used it."""
        self.engines.extend(engine_row(r.engine, r.tests, r.restart, r.survivors) for r in records)

    def to_wire(self) -> str:
        return json.dumps(
            {"tests": self.tests, "engines": self.engines, "configurations": self.configurations,
             "shard": self.shard, "test_s": self.test_s},
            default=str,
        )

    def survivors(self) -> list[tuple[str, str]]:
        """(engine label, process) for every process an engine left after SIGKILL."""
        return [(row["label"], who) for row in self.engines for who in row.get("survived_kill", [])]

    def absorb(self, wire: str | None, worker: str) -> None:
        if not wire:
            self.lost_workers.append(worker)
            return
        data = json.loads(wire)
        self.tests.extend(data.get("tests", []))
        self.configurations = max(self.configurations, int(data.get("configurations", 0)))
        self.shard = self.shard or data.get("shard")  # every worker deals the same shard
        for kind, seconds in (data.get("test_s") or {}).items():
            self.test_s[kind] = self.test_s.get(kind, 0.0) + float(seconds)
        for row in data.get("engines", []):
            row["worker"] = worker
            self.engines.append(row)

def junit_properties(test: TestRow) -> list[tuple[str, object]]:
    """The per-test numbers CI dashboards show (junitxml ``<property>``)."""
    props: list[tuple[str, object]] = [
        ("enginedead_batch_size", test["batch_size"]),
        ("enginedead_deadline_s", test["deadline_s"]),
        ("enginedead_step_p50_s", test["step_p50_s"]),
        ("enginedead_step_max_s", test["step_max_s"]),
        ("enginedead_verdict", verdict_word(test["verdict"])),
    ]
    events = test.get("guard_events") or []
    if events:
        props.append(("enginedead_guard_decisions", guard_tally(events)))
    return props

def guard_tally(events: Iterable[Mapping[str, Any]]) -> str:
    """The guard's decisions in a few words: ``2 SLOW (waited), 1 HUNG (ended)``.

    Read from each event's verdict and action (``GuardEvent.to_dict``), never its words.
    """
    counts: dict[str, int] = {}
    for data in events:
        e = GuardEvent.from_dict(data)
        key = f"{e.verdict} ({e.action.tally_word})"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {key}" for key, n in counts.items())

def verdict_word(verdict: object) -> str:
    """ok / false death / genuine death, as the tables say it (``verdict``: as written, or None)."""
    found = Verdict.read(verdict)
    if found is None:
        return "ok"
    return "false death" if found.false_death else "genuine death"

def death_counts(deaths: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(false deaths, genuine deaths) among verdict records."""
    false = genuine = 0
    for d in deaths:
        if Verdict.parse(d.get("verdict")).false_death:
            false += 1
        else:
            genuine += 1
    return false, genuine

def engine_row(
    engine: Started, tests: Sequence[str], restart: bool = False, survivors: Sequence[Described] = ()
) -> EngineRow:
    """One engine as the summary, the report and junitxml show it."""
    stats = summarize(engine.evidence.steps())
    used = engine.instructions
    deadline = used[-1].deadline_whole_s if used else 0.0
    false, genuine = death_counts(engine.deaths)
    return EngineRow(
        label=engine.spec.label(),
        kind=engine.kind,
        batch_size=engine.spec.max_num_seqs,
        deadline_s=deadline,
        deadlines=[i.deadline_whole_s for i in used],
        deadline_source="; ".join(dict.fromkeys(i.deadline_source for i in used)),
        injection="; ".join(dict.fromkeys(i.injection.describe() for i in used)) or "none",
        guard=engine.spec.guard.describe() if engine.spec.guard else None,
        model=engine.spec.model,
        start_s=None if engine.start_s is None else round(engine.start_s, 2),
        restart=restart,
        steps=stats.steps,
        step_p50_s=_r(stats.p50_s),
        step_max_s=_r(stats.max_s),
        step_total_s=round(sum(s.seconds for s in engine.evidence.steps() if s.seconds is not None), 3),
        headroom=_r(deadline / stats.max_s) if stats.max_s and deadline else None,
        false_deaths=false,
        genuine_deaths=genuine,
        guard_events=[e.to_dict() for e in engine.evidence.guard_events()],
        tests=list(tests),
        pids=[{"pid": r.pid, "create_time": r.create_time} for r in [*engine.procs, *engine.node_procs]],
        shm=sorted(engine.shm | engine.node_shm),
        survived_kill=[s.describe() for s in survivors],
    )

def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)

def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}s"

def time_breakdown(results: Results) -> dict[str, Any]:
    """Where the run's time went: engine starts (per configuration), steps, tests by kind."""
    per: dict[str, dict[str, Any]] = {}
    for r in results.engines:
        entry = per.setdefault(r["label"], {"configuration": r["label"], "starts": 0, "start_s": 0.0})
        entry["starts"] += 1
        entry["start_s"] = round(entry["start_s"] + (r.get("start_s") or 0.0), 2)
    return {
        "engine_starts": len(results.engines),
        "engine_start_s": round(sum(r.get("start_s") or 0.0 for r in results.engines), 2),
        "per_configuration": list(per.values()),
        "steps": sum(r.get("steps", 0) for r in results.engines),
        "step_s": round(sum(r.get("step_total_s", 0.0) for r in results.engines), 2),
        "engine_tests_s": round(results.test_s.get("engine", 0.0), 2),
        "other_tests_s": round(results.test_s.get("other", 0.0), 2),
    }

def time_lines(t: Mapping[str, Any]) -> list[str]:
    """The breakdown, one line per kind, for the terminal summary."""
    per = "; ".join(f"{c['configuration']}: {c['starts']} in {c['start_s']:.1f}s"
                    for c in t["per_configuration"])
    return [
        f"time: engine starts {t['engine_starts']} in {t['engine_start_s']:.1f}s ({per})",
        f"time: steps {t['steps']} in {t['step_s']:.1f}s",
        f"time: tests with an engine {t['engine_tests_s']:.1f}s (their starts and steps included), "
        f"without {t['other_tests_s']:.1f}s",
    ]

def build(results: Results, settings: RunFacts, machine: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON report (schema: report.schema.json, ``schema_version`` 1)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "vllm": {"version": settings.vllm_version, "deadline_env": releases.DEADLINE_ENV},
        "machine": machine,
        "policy": {"name": settings.policy_name, "source": settings.policy_source},
        "batch_sizes": list(settings.batch_sizes),
        "engines_started": len(results.engines),
        "restarts": sum(1 for e in results.engines if e.get("restart")),
        "configurations": results.configurations,
        "engines": results.engines,
        "tests": results.tests,
        "lost_workers": results.lost_workers,
        "time": time_breakdown(results),
        **({"shard": results.shard} if results.shard else {}),
    }

def dumps(data: dict[str, Any]) -> str:
    """The report as its file holds it."""
    return json.dumps(data, indent=2, default=str) + "\n"
