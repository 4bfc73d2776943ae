"""A real Prometheus (Debian's ``prometheus``) for a test or the soak: its own directory, a loopback port,
a short scrape and rule evaluation, started and stopped by its pid (never by name), queried over its
HTTP API.  Its targets are a file it watches (``point``): a server restarted on a new port is scraped
from its first answer on, as its own ``instance``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..engines.server import free_port

MISSING = "prometheus not found: install Debian's package `prometheus` (apt-get install prometheus)"

#: one series of a range query: its labels, and its (unix seconds, value) samples
Series = tuple[dict[str, str], list[tuple[float, float]]]


class PrometheusError(RuntimeError):
    """Prometheus would not start, or answered a query with an error."""


class Prometheus:
    """One running Prometheus: ``query`` runs PromQL on what it recorded, ``point`` sets what it scrapes."""

    def __init__(self, port: int, log: Path, targets: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.targets = targets

    def point(self, *targets: str) -> None:
        """Scrape ``targets`` (``host:port``, path ``/metrics``) from now on, as job ``vllm``."""
        part = self.targets.with_suffix(".part")
        part.write_text(json.dumps([{"targets": list(targets), "labels": {}}]))
        os.replace(part, self.targets)

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            data = json.loads(answer.read())
        if data.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {data}")
        return data["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar) ``expr`` is now, as Prometheus answers it."""
        data = self.get("/api/v1/query", query=expr)
        return data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]

    def value(self, expr: str) -> float | None:
        """The one value of ``expr`` now (the sum where it has several series); None with no series."""
        found = self.query(expr)
        return sum(float(s["value"][1]) for s in found) if found else None

    def series(self, selector: str, range_s: float) -> list[Series]:
        """Every sample Prometheus holds of ``selector`` over the last ``range_s``, series by series."""
        data = self.get("/api/v1/query", query=f"{selector}[{max(1, int(range_s + 0.999))}s]")
        return [(dict(s["metric"]), [(float(t), float(v)) for t, v in s["values"]]) for s in data["result"]]


def _wait_ready(prom: Prometheus, proc: subprocess.Popen[bytes], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PrometheusError(f"prometheus exited ({proc.returncode}): {prom.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise PrometheusError(f"prometheus not ready in {limit_s:g} s: {prom.log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to its pid, SIGKILL to the same pid after 10 s; reaped either way."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def config(targets: Path, rules: Path | None, interval_s: float) -> str:
    """prometheus.yml: job ``vllm`` from the targets file, every ``interval_s``, with ``rules``."""
    every = f"{round(interval_s * 1000)}ms"
    lines = ["global:", f"  scrape_interval: {every}", f"  evaluation_interval: {every}"]
    if rules is not None:
        lines += ["rule_files:", f"  - {json.dumps(str(rules))}"]
    lines += ["scrape_configs:", "  - job_name: vllm", f"    scrape_timeout: {every}", "    file_sd_configs:",
              f"      - files: [{json.dumps(str(targets))}]", "        refresh_interval: 1s"]
    return "\n".join(lines) + "\n"


@contextmanager
def prometheus(directory: Path, targets: Sequence[str] = (), rules: Path | None = None,
               interval_s: float = 1.0) -> Iterator[Prometheus]:
    """Prometheus scraping ``targets`` (``host:port``, path ``/metrics``) every ``interval_s``, with
    ``rules``; its data under ``directory``.  Stopped by its pid on the way out."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise PrometheusError(MISSING)
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    prom = Prometheus(port, directory / "prometheus.log", directory / "targets.json")
    prom.point(*targets)
    (directory / "prometheus.yml").write_text(config(prom.targets, rules, interval_s))
    with open(prom.log, "wb") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={directory / 'prometheus.yml'}",
             f"--storage.tsdb.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=directory)
    try:
        _wait_ready(prom, proc, 30.0)
        yield prom
    finally:
        stop(proc)


#: what the docs' picture shows: the step in flight against vLLM's deadline, and the guard's decisions
SHOT_GRAPHS = ("enginedead_step_age_seconds or enginedead_stock_deadline_seconds",
               "sum by (action, verdict) (enginedead_guard_decisions_total)")


def graph_url(prom: Prometheus, range_s: int, graphs: Sequence[str] = SHOT_GRAPHS) -> str:
    """Prometheus' own graph page with ``graphs``, each over the last ``range_s``."""
    params = {}
    for i, expr in enumerate(graphs):
        params.update({f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.stacked": "0",
                       f"g{i}.range_input": f"{range_s}s"})
    return f"{prom.url}/graph?{urllib.parse.urlencode(params)}"


def screenshot(prom: Prometheus, path: str, range_s: int = 60, graphs: Sequence[str] = SHOT_GRAPHS,
               height: int = 1480) -> None:
    """Prometheus' own graph page over the last ``range_s`` as a PNG, taken with headless Chromium."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise PrometheusError("no chromium on PATH for the screenshot (Debian: apt-get install chromium)")
    with subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size=1280,{height}", "--virtual-time-budget=8000",
                           f"--screenshot={path}", graph_url(prom, range_s, graphs)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        try:
            proc.wait(timeout=60)
        finally:
            stop(proc)
