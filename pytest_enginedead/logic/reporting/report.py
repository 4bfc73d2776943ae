"""What the run found, as data: the rows of its engine tests and engines, the JSON report,
junitxml properties, and where its time went.

The rows are ``rows.TestRow`` and ``rows.EngineRow``; under xdist each worker sends its own
(``Results.to_wire``) and the controller merges them (``absorb``), so there is one table,
one file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ...contract.decisions import Verdict
from ...contract.guardfiles import GuardEvent
from .. import releases
from .rows import Described, EngineRow, Observed, Phase, Started, TestRow

SCHEMA_VERSION = 1

SCHEMA_PATH = str(Path(__file__).parents[2] / "report.schema.json")


class StartRecord(Protocol):
    """One start and the tests that used it (``harness.engines.pool.EngineRecord``)."""

    @property
    def engine(self) -> Started: ...

    @property
    def tests(self) -> list[str]: ...

    @property
    def restart(self) -> bool: ...

    @property
    def survivors(self) -> Sequence[Described]: ...


class RunFacts(Protocol):
    """What the report says of the run's settings (``pytest_plugin.options.Settings``)."""

    @property
    def vllm_version(self) -> str | None: ...

    @property
    def policy_name(self) -> str: ...

    @property
    def policy_source(self) -> str: ...

    @property
    def batch_sizes(self) -> tuple[int, ...]: ...


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
        row = TestRow.observed(nodeid, rep, handle)
        self.tests.append(row)
        return row

    def add_engines(self, records: Iterable[StartRecord]) -> None:
        """One row per engine this process started, with the tests that used it."""
        self.engines.extend(EngineRow.of(r.engine, r.tests, r.restart, r.survivors) for r in records)

    def to_wire(self) -> str:
        """What an xdist worker sends the controller (``absorb`` reads it)."""
        return json.dumps(
            {"tests": [t.to_dict() for t in self.tests], "engines": [e.to_dict() for e in self.engines],
             "configurations": self.configurations, "shard": self.shard, "test_s": self.test_s},
            default=str,
        )

    def survivors(self) -> list[tuple[str, str]]:
        """(engine label, process) for every process an engine left after SIGKILL."""
        return [(row.label, who) for row in self.engines for who in row.survived_kill]

    def absorb(self, wire: str | None, worker: str) -> None:
        if not wire:
            self.lost_workers.append(worker)
            return
        data = json.loads(wire)
        self.tests.extend(TestRow.from_dict(t) for t in data.get("tests", []))
        self.configurations = max(self.configurations, int(data.get("configurations", 0)))
        self.shard = self.shard or data.get("shard")  # every worker deals the same shard
        for kind, seconds in (data.get("test_s") or {}).items():
            self.test_s[kind] = self.test_s.get(kind, 0.0) + float(seconds)
        self.engines.extend(replace(EngineRow.from_dict(row), worker=worker)
                            for row in data.get("engines", []))

def junit_properties(test: TestRow) -> list[tuple[str, object]]:
    """The per-test numbers CI dashboards show (junitxml ``<property>``)."""
    props: list[tuple[str, object]] = [
        ("enginedead_batch_size", test.batch_size),
        ("enginedead_deadline_s", test.deadline_s),
        ("enginedead_step_p50_s", test.step_p50_s),
        ("enginedead_step_max_s", test.step_max_s),
        ("enginedead_verdict", verdict_word(test.verdict)),
    ]
    if test.guard_events:
        props.append(("enginedead_guard_decisions", guard_tally(test.guard_events)))
    return props

def guard_tally(events: Iterable[GuardEvent]) -> str:
    """The guard's decisions in a few words: ``2 SLOW (waited), 1 HUNG (ended)``: from each
    event's verdict and action, never its words."""
    counts: dict[str, int] = {}
    for e in events:
        key = f"{e.verdict} ({e.action.tally_word})"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {key}" for key, n in counts.items())

def verdict_word(verdict: Verdict | None) -> str:
    """ok / false death / genuine death, as the tables say it."""
    if verdict is None:
        return "ok"
    return "false death" if verdict.false_death else "genuine death"

def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}s"

def time_breakdown(results: Results) -> dict[str, Any]:
    """Where the run's time went: engine starts (per configuration), steps, tests by kind."""
    per: dict[str, dict[str, Any]] = {}
    for r in results.engines:
        entry = per.setdefault(r.label, {"configuration": r.label, "starts": 0, "start_s": 0.0})
        entry["starts"] += 1
        entry["start_s"] = round(entry["start_s"] + (r.start_s or 0.0), 2)
    return {
        "engine_starts": len(results.engines),
        "engine_start_s": round(sum(r.start_s or 0.0 for r in results.engines), 2),
        "per_configuration": list(per.values()),
        "steps": sum(r.steps for r in results.engines),
        "step_s": round(sum(r.step_total_s for r in results.engines), 2),
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
        "restarts": sum(1 for e in results.engines if e.restart),
        "configurations": results.configurations,
        "engines": [e.to_dict() for e in results.engines],
        "tests": [t.to_dict() for t in results.tests],
        "lost_workers": results.lost_workers,
        "time": time_breakdown(results),
        **({"shard": results.shard} if results.shard else {}),
    }

def dumps(data: dict[str, Any]) -> str:
    """The report as its file holds it."""
    return json.dumps(data, indent=2, default=str) + "\n"
