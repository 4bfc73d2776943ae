"""A real Prometheus scrapes a guarded server through a slow window: what it recorded is what the server
counted, every dashboard query returns series, and the shipped rules fire where they should.

One guarded server (hang_s 5 s, a 2 s deadline), each step busy 0.2 s a sequence: a batch of 16 runs
3.2 s steps, past vLLM's deadline, and the guard waits on each.  Prometheus (``promserver.py``) scrapes
its ``/metrics`` every second with the package's rules loaded.
"""

from __future__ import annotations

import shutil
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from promserver import MISSING, Prometheus, prometheus

import pytest_enginedead
from pytest_enginedead.contract.decisions import GuardAction
from pytest_enginedead.logic.metrics import dashboard

RULES = Path(pytest_enginedead.__file__).parent / "monitoring" / "enginedead-rules.yml"
HANG_S = 5.0
DEADLINE_S = 2


def served(port: int) -> dict[str, float]:
    """The server's own /metrics now: our samples by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {f"{s.name}{sorted(s.labels.items())}": s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name.startswith("enginedead_")}


def settle(prom: Prometheus, port: int, limit_s: float = 20.0) -> dict[str, float]:
    """The server's figures once Prometheus has scraped them as they stand (the traffic is over)."""
    deadline = time.monotonic() + limit_s
    while True:
        now = served(port)
        forward = now["enginedead_step_duration_seconds_count[('phase', 'forward')]"]
        recorded = prom.value('sum(enginedead_step_duration_seconds_count{phase="forward"})')
        if recorded == forward:
            return now
        assert time.monotonic() < deadline, f"Prometheus holds {recorded} forward steps, the server {forward}"
        time.sleep(0.5)


def as_prometheus(expr: str) -> str:
    """A dashboard query with Grafana's variables as this test's Prometheus takes them."""
    for variable, value in dashboard.GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def wait_for(prom: Prometheus, expr: str, limit_s: float = 20.0) -> list[dict[str, object]]:
    deadline = time.monotonic() + limit_s
    while not (found := prom.query(expr)):
        assert time.monotonic() < deadline, f"{expr}: no series after {limit_s:g} s"
        time.sleep(0.5)
    return found


@pytest.mark.enginedead_guard(hang_s=HANG_S)
def test_prometheus_records_what_the_guarded_server_counted(vllm_server_factory, tmp_path):
    if not shutil.which("prometheus"):
        pytest.skip(MISSING)
    server = vllm_server_factory(16, timeout_s=DEADLINE_S, inject={"slow_s_per_seq": 0.2})
    with prometheus(tmp_path / "prometheus", f"127.0.0.1:{server.port}", RULES) as prom:
        wait_for(prom, "enginedead_build_info")
        server.complete(1, max_tokens=4)  # fast steps: 0.2 s
        server.complete(16, max_tokens=4)  # the slow window: 3.2 s steps past the 2 s deadline
        server.complete(1, max_tokens=4)
        now = settle(prom, server.port)
        waits = [e for e in server.guard_events() if e.action is GuardAction.WAIT]
        steps = [s for s in server.step_times() if s.seconds is not None]
        long = [s for s in steps if s.seconds > DEADLINE_S]
        # what Prometheus recorded is what the server counted
        prom_waits = prom.value('sum(enginedead_guard_decisions_total{action="wait"})')
        prom_forward = prom.value('sum(enginedead_step_duration_seconds_count{phase="forward"})')
        prom_saved = prom.value("sum(enginedead_guard_saved_steps_total)")
        assert waits and prom_waits == len(waits), (prom_waits, waits)
        assert prom_forward == now["enginedead_step_duration_seconds_count[('phase', 'forward')]"]
        assert prom_forward == len(steps), (prom_forward, len(steps))
        assert long and prom_saved == len(long), (prom_saved, [s.seconds for s in steps])
        assert prom.value("sum(enginedead_engine_deaths_total)") == 0
        # every dashboard panel's query returns series
        empty = [expr for expr in map(as_prometheus, dashboard.queries()) if not prom.query(expr)]
        assert empty == [], empty
        # the shipped rules: the guard's waits fire their alert; nothing else does
        wait_for(prom, 'ALERTS{alertname="EngineGuardWaitingPastStockDeadline",alertstate="firing"}')
        firing = sorted({s["metric"]["alertname"] for s in prom.query('ALERTS{alertstate="firing"}')})
        assert firing == ["EngineGuardWaitingPastStockDeadline"], firing
        scrapes = prom.value("count_over_time(up[10m])")
        answered = prom.value("sum_over_time(up[10m])")
        print(f"\nprometheus: {prom_forward:g} forward steps, {prom_waits:g} waits, {prom_saved:g} saved, "
              f"{len(dashboard.queries())} dashboard queries with series; firing {firing}; "
              f"{answered:g} of {scrapes:g} scrapes answered")
