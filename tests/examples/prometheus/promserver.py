"""A real Prometheus (Debian's ``prometheus``) for one test: its own directory, a loopback port, a 1 s
scrape and rule evaluation, started and stopped by its pid (never by name), queried over its HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MISSING = "prometheus not found: install Debian's package `prometheus` (apt-get install prometheus)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    """One running Prometheus: ``query`` runs PromQL on what it recorded."""

    def __init__(self, port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = log

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            data = json.loads(answer.read())
        assert data["status"] == "success", data
        return data["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar) ``expr`` is now, as Prometheus answers it."""
        data = self.get("/api/v1/query", query=expr)
        return data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]

    def value(self, expr: str) -> float | None:
        """The one value of ``expr`` now (the sum where it has several series); None with no series."""
        found = self.query(expr)
        return sum(float(s["value"][1]) for s in found) if found else None


def _wait_ready(prom: Prometheus, proc: subprocess.Popen[bytes], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited ({proc.returncode}): {prom.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"prometheus not ready in {limit_s:g} s: {prom.log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to its pid, SIGKILL to the same pid after 10 s; reaped either way."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextmanager
def prometheus(directory: Path, target: str, rules: Path | None = None) -> Iterator[Prometheus]:
    """Prometheus scraping ``target`` (``host:port``, path ``/metrics``) every second, with ``rules``."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError(MISSING)
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    lines = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s"]
    if rules is not None:
        lines += ["rule_files:", f"  - {json.dumps(str(rules))}"]
    lines += ["scrape_configs:", "  - job_name: vllm", "    static_configs:",
              f"      - targets: [{json.dumps(target)}]"]
    config.write_text("\n".join(lines) + "\n")
    port = free_port()
    log = directory / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=directory)
    try:
        prom = Prometheus(port, log)
        _wait_ready(prom, proc, 30.0)
        yield prom
    finally:
        _stop(proc)


#: what the docs' picture shows: the step in flight against vLLM's deadline, and the guard's decisions
SHOT_GRAPHS = ("enginedead_step_age_seconds or enginedead_stock_deadline_seconds",
               "sum by (action, verdict) (enginedead_guard_decisions_total)")


def screenshot(prom: Prometheus, path: str, range_s: int = 60) -> None:
    """Prometheus' own graph page over the last ``range_s`` as a PNG, taken with headless Chromium."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise RuntimeError("no chromium on PATH for the screenshot")
    params = {}
    for i, expr in enumerate(SHOT_GRAPHS):
        params.update({f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.stacked": "0",
                       f"g{i}.range_input": f"{range_s}s"})
    url = f"{prom.url}/graph?{urllib.parse.urlencode(params)}"
    with subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--window-size=1280,1480", "--virtual-time-budget=8000", f"--screenshot={path}",
                           url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        try:
            proc.wait(timeout=60)
        finally:
            _stop(proc)
