"""What the run found: the terminal summary, the JSON report, junitxml properties.

All three read the same rows (``TestRow``, ``EngineRow``) so they cannot disagree.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

import pytest

from .. import compat
from ..contract.steps import summarize
from ..harness.engine import EngineBase, Handle
from ..harness.fingerprint import Machine, this_machine
from ..harness.outputs import Output, claim
from ..harness.pool import EngineRecord
from .options import Settings

SCHEMA_VERSION = 1
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "report.schema.json")


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

    def observe(self, nodeid: str, rep: pytest.TestReport, handle: Handle) -> TestRow | None:
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
            guard_events=[asdict(e) for e in handle.guard_events()],
        )
        self.tests.append(row)
        return row

    def add_engines(self, records: Iterable[EngineRecord]) -> None:
        """One row per engine this process started, with the tests that used it."""
        self.engines.extend(engine_row(r.engine, r.tests, r.restart) for r in records)

    def to_wire(self) -> str:
        return json.dumps(
            {"tests": self.tests, "engines": self.engines, "configurations": self.configurations,
             "shard": self.shard, "test_s": self.test_s},
            default=str,
        )

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
    """The guard's decisions in a few words: ``2 SLOW (waited), 1 HUNG (ended)``."""
    counts: dict[str, int] = {}
    for e in events:
        outcome = str(e.get("outcome", ""))
        what = ("waited" if outcome.startswith("waiting") else "cap" if outcome.startswith("past the cap")
                else "ended" if outcome.startswith("ending the wait") else "noted")
        key = f"{e.get('verdict')} ({what})"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {key}" for key, n in counts.items())


def verdict_word(verdict: str | None) -> str:
    """ok / false death / genuine death, as the tables say it."""
    if verdict is None:
        return "ok"
    return "false death" if verdict == "SLOW" else "genuine death"


def death_counts(deaths: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(false deaths, genuine deaths) among verdict records."""
    false = genuine = 0
    for d in deaths:
        if d.get("verdict") == "SLOW":
            false += 1
        else:
            genuine += 1
    return false, genuine


def engine_row(engine: EngineBase, tests: Sequence[str], restart: bool = False) -> EngineRow:
    """One engine as the summary, the report and junitxml show it."""
    stats = summarize(engine.steps())
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
        step_total_s=round(sum(s.seconds for s in engine.steps() if s.seconds is not None), 3),
        headroom=_r(deadline / stats.max_s) if stats.max_s and deadline else None,
        false_deaths=false,
        genuine_deaths=genuine,
        guard_events=[asdict(e) for e in engine.guard_events()],
        tests=list(tests),
        pids=[{"pid": r.pid, "create_time": r.create_time} for r in engine.procs],
        shm=sorted(engine.shm),
    )


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}s"


def terminal_summary(tr: Any, results: Results, policy_name: str) -> None:
    """Only when engines ran: a line per engine configuration, then the count."""
    rows = results.engines
    if not rows:
        return
    false = sum(r["false_deaths"] for r in rows)
    genuine = sum(r["genuine_deaths"] for r in rows)
    if tr.config.getoption("verbose") < 0:
        tr.write_line(
            f"enginedead: {len(rows)} engine(s) started, {false} false death(s), "
            f"{genuine} genuine death(s)"
        )
        return
    tr.write_sep("=", "enginedead")
    tr.write_line(
        f"{'batch':>5}  {'kind':<6}  {'deadlines':<14} {'steps':>5}  {'p50':>8}  {'max':>8}  "
        f"{'start':>6}  {'false':>5}  {'genuine':>7}  configuration; faults"
    )
    for r in rows:
        start = "-" if r["start_s"] is None else f"{r['start_s']:.1f}s"
        deadlines = ",".join(f"{d:g}s" for d in dict.fromkeys(r.get("deadlines") or [r["deadline_s"]]))
        extra = (" (restart)" if r.get("restart") else "") + (f"; {r['guard']}" if r.get("guard") else "")
        if r.get("guard_events"):
            extra += f"; guard decisions: {guard_tally(r['guard_events'])}"
        tr.write_line(
            f"{r['batch_size']:>5}  {r.get('kind', 'engine'):<6}  {deadlines:<14} {r['steps']:>5}  "
            f"{_fmt_s(r['step_p50_s']):>8}  {_fmt_s(r['step_max_s']):>8}  {start:>6}  "
            f"{r['false_deaths']:>5}  {r['genuine_deaths']:>7}  {r['label']}{extra}; faults: {r['injection']}"
        )
    restarts = sum(1 for r in rows if r.get("restart"))
    tr.write_line(
        f"engines started: {len(rows)}; restarts after a death: {restarts}; "
        f"false deaths: {false}; genuine deaths: {genuine}; policy: {policy_name}"
    )
    for line in time_lines(time_breakdown(results)):
        tr.write_line(line)
    for worker in results.lost_workers:
        tr.write_line(f"enginedead: no results from xdist worker {worker} (it crashed)", red=True)


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


def machine() -> Machine:
    """The report's ``machine`` object: the fingerprint step times hold for (``fingerprint``)."""
    return this_machine()


def build(results: Results, settings: Settings) -> dict[str, Any]:
    """The JSON report (schema: report.schema.json, ``schema_version`` 1)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "vllm": {"version": settings.vllm_version, "deadline_env": compat.DEADLINE_ENV},
        "machine": machine(),
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


def write(out: Output | str, data: dict[str, Any]) -> None:
    """Through the one writer (``outputs``): a file whole or not at all, a device in place."""
    target = out if isinstance(out, Output) else claim(out, repr(out))
    target.write_text(dumps(data))
