"""What the run found: the terminal summary and the JSON report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from .engine import EngineHandle, summarize


@dataclass
class Results:
    """Per-test outcomes of engine tests, with the verdicts on any engine death."""

    tests: list[dict[str, Any]] = field(default_factory=list)

    def observe(self, item: pytest.Item, rep: pytest.TestReport, handle: EngineHandle) -> None:
        if rep.when == "setup" and rep.passed:
            return
        if rep.when == "teardown" and (rep.passed or rep.skipped):
            return
        self.tests.append(
            {
                "nodeid": item.nodeid,
                "when": rep.when,
                "outcome": rep.outcome,
                "batch_size": handle.batch_size,
                "timeout_s": handle.timeout_s,
                "engine": handle.spec.label(),
                "deaths": list(handle.deaths),
            }
        )


def terminal_summary(tr: Any, pool: Any, results: Results, settings: Any) -> None:
    if not pool.started:
        return
    tr.write_sep("=", "enginedead")
    for rec in pool.records:
        eng = rec.engine
        stats = summarize(eng.steps())
        false = sum(1 for d in eng.deaths if d["verdict"] == "SLOW")
        genuine = len(eng.deaths) - false
        p50 = "-" if stats["p50_s"] is None else f"{stats['p50_s']:.3f}s"
        mx = "-" if stats["max_s"] is None else f"{stats['max_s']:.3f}s"
        start = "-" if eng.start_s is None else f"{eng.start_s:.1f}s"
        tr.write_line(
            f"{rec.spec.label()}: steps {stats['steps']}, p50 {p50}, max {mx}, "
            f"start {start}, false deaths {false}, genuine deaths {genuine}"
        )
    tr.write_line(f"engines started: {pool.started}")
