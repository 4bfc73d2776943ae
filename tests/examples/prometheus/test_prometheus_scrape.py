"""A real Prometheus scrapes a guarded server through a slow window: what it recorded is what the server
counted, every dashboard query returns series, and the shipped rules fire where they should.

One guarded server (hang_s 5 s, a 2 s deadline), each step busy 0.2 s a sequence: a batch of 16 runs
3.2 s steps, past vLLM's deadline, and the guard waits on each.  Prometheus
(``harness.probing.promserver``) scrapes its ``/metrics`` every second with the package's rules loaded.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import pytest_enginedead
from pytest_enginedead.contract.decisions import GuardAction
from pytest_enginedead.harness.probing.promserver import MISSING, Prometheus, prometheus, screenshot
from pytest_enginedead.logic.metrics import dashboard

RULES = Path(pytest_enginedead.__file__).parent / "monitoring" / "enginedead-rules.yml"
HANG_S = 5.0
DEADLINE_S = 2
#: where to write a picture of Prometheus' graph page over the run (unset: none)
SHOT_ENV = "PROMETHEUS_SHOT"
#: the server's own count of forward steps, as ``served`` keys it
FORWARD = "enginedead_step_duration_seconds_count[('phase', 'forward')]"


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
        forward = now[FORWARD]
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


def recorded(prom: Prometheus) -> dict[str, float | None]:
    """What Prometheus recorded last: the guard's waits, the forward steps, the saved steps, the deaths."""
    return {"waits": prom.value('sum(enginedead_guard_decisions_total{action="wait"})'),
            "forward": prom.value('sum(enginedead_step_duration_seconds_count{phase="forward"})'),
            "saved": prom.value("sum(enginedead_guard_saved_steps_total)"),
            "deaths": prom.value("sum(enginedead_engine_deaths_total)")}


def evidence(server) -> tuple[list[object], list[float]]:
    """The server's own evidence: the guard's waits, and the seconds of each step its worker ran."""
    waits = [e for e in server.guard_events() if e.action is GuardAction.WAIT]
    return waits, [s.seconds for s in server.step_times() if s.seconds is not None]


def without_series(prom: Prometheus) -> list[str]:
    """The dashboard's queries that return nothing."""
    return [expr for expr in map(as_prometheus, dashboard.queries()) if not prom.query(expr)]


def alerts_firing(prom: Prometheus) -> list[str]:
    """The shipped rules' alerts firing once the guard's-wait alert fires."""
    wait_for(prom, 'ALERTS{alertname="EngineGuardWaitingPastStockDeadline",alertstate="firing"}')
    return sorted({str(s["metric"]["alertname"]) for s in prom.query('ALERTS{alertstate="firing"}')})


@pytest.mark.enginedead_guard(hang_s=HANG_S)
def test_prometheus_records_what_the_guarded_server_counted(vllm_server_factory, tmp_path):
    if not shutil.which("prometheus"):
        pytest.skip(MISSING)
    server = vllm_server_factory(16, timeout_s=DEADLINE_S, inject={"slow_s_per_seq": 0.2})
    with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{server.port}"], RULES) as prom:
        wait_for(prom, "enginedead_build_info")
        server.complete(1, max_tokens=4)  # fast steps: 0.2 s
        server.complete(16, max_tokens=4)  # the slow window: 3.2 s steps past the 2 s deadline
        server.complete(1, max_tokens=4)
        now = settle(prom, server.port)
        seen = recorded(prom)
        waits, steps = evidence(server)
        empty = without_series(prom)
        firing = alerts_firing(prom)
        scrapes = (prom.value("sum_over_time(up[10m])"), prom.value("count_over_time(up[10m])"))
        if os.environ.get(SHOT_ENV):  # the docs' picture (docs/how-to/monitoring.md), on request
            screenshot(prom, os.environ[SHOT_ENV])
        print(f"\nprometheus: {seen['forward']:g} forward steps, {seen['waits']:g} waits, {seen['saved']:g} "
              f"saved, {len(dashboard.queries()) - len(empty)} dashboard queries with series; firing "
              f"{firing}; {scrapes[0]:g} of {scrapes[1]:g} scrapes answered; the server: {len(waits)} waits, "
              f"{len(steps)} steps {[round(x, 2) for x in steps]}")
    # what Prometheus recorded is what the server counted
    assert waits and seen["waits"] == len(waits), (seen, waits)
    assert seen["forward"] == now[FORWARD] == len(steps), (seen, steps)
    long = [x for x in steps if x > DEADLINE_S]
    assert long and seen["saved"] == now["enginedead_guard_saved_steps_total[]"] >= len(long), (seen, steps)
    assert seen["deaths"] == 0, seen
    # every dashboard panel's query returns series; the guard's waits fire their alert, nothing else does
    assert empty == [], empty
    assert firing == ["EngineGuardWaitingPastStockDeadline"], firing
