"""The soak's Prometheus with no vLLM: a real Prometheus (skipped without Debian's package) scrapes a
stand-in ``/metrics`` that is restarted, and ``soakprom.Watch`` reads back each start on a new port as
its own instance, and starts on the same port (as the soak's supervisor restarts a server) as one
instance whose counters carried on, and the restart as ``up`` back after failed scrapes."""

from __future__ import annotations

import http.server
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from pytest_enginedead.contract.decisions import Decision, GuardAction, Verdict
from pytest_enginedead.harness.load.soakprom import Watch
from pytest_enginedead.harness.probing.promserver import MISSING, prometheus

pytestmark = pytest.mark.processes

WAIT_SLOW = Decision(GuardAction.WAIT, Verdict.SLOW)


def exposition(steps: int, waits: int) -> bytes:
    return (f'enginedead_step_duration_seconds_count{{phase="forward"}} {steps}\n'
            f'enginedead_guard_decisions_total{{action="wait",verdict="SLOW"}} {waits}\n'
            f'enginedead_guard_decisions_total{{action="end",verdict="HUNG"}} 0\n'
            f'enginedead_engine_deaths_total{{verdict="SLOW"}} 0\n').encode()


@contextmanager
def metrics(steps: int, waits: int, port: int = 0) -> Iterator[str]:
    """A stand-in server whose /metrics says ``steps`` and ``waits`` (on ``port``, 0: a free one); its
    base URL."""
    body = exposition(steps, waits)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def watch(tmp_path: Path) -> Iterator[Watch]:
    """A real Prometheus scraping every 0.5 s, watched as the soak watches it (skipped without one)."""
    if shutil.which("prometheus") is None:
        pytest.skip(MISSING)
    with prometheus(tmp_path / "prom", interval_s=0.5) as prom:
        yield Watch(prom, 0.5)


def start(watch: Watch, steps: int, waits: int, port: int = 0) -> str:
    """A start of the stand-in server (``metrics``) that serves until Prometheus has scraped it, then
    stops; its base URL."""
    with metrics(steps, waits, port) as url:
        watch.point(url)
        assert watch.settle(url)
    return url


def counted(decisions: Mapping[Decision, int]) -> dict[Decision, int]:
    """The decisions Prometheus counted at least once."""
    return {k: n for k, n in decisions.items() if n}


def test_each_start_is_read_back_as_its_own_instance(watch: Watch) -> None:
    start(watch, 7, 2)
    start(watch, 3, 0)
    found = {s.instance: (s.steps, counted(s.decisions), s.deaths) for s in watch.scraped()}
    assert sorted(found.values(), key=str) == [(3, {}, 0), (7, {WAIT_SLOW: 2}, 0)]


def test_starts_on_the_same_port_are_one_instance_that_came_back(watch: Watch) -> None:
    first = start(watch, 7, 2)
    time.sleep(2.5)  # down for several scrapes, as a restarted server is
    port = int(first.rsplit(":", 1)[1].split("/")[0])
    start(watch, 9, 3, port)  # the counters carried on
    found = [(s.steps, counted(s.decisions), s.comebacks) for s in watch.scraped()]
    assert found == [(9, {WAIT_SLOW: 3}, 1)]
