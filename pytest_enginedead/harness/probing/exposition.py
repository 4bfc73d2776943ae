"""``enginedead probe --prometheus``: the server's figures as Prometheus text, for a node exporter's
textfile collector where the API port is not scraped.

The same families vLLM's ``/metrics`` serves with the plugin (``logic.metrics``), read from the same
records (the engine core's, its workers', the server's carried totals), found from the process
listening on the port; plus ``enginedead_probe_alive``, the probe's own answer.  Like the probe, it
never sends the server a request, and imports neither pytest nor vLLM.
"""

from __future__ import annotations

import contextlib
import time

import psutil

from ...contract.guardfiles import state_dir
from ...contract.metricsfile import metrics_dir, record_of
from ...logic import machine
from ...logic.metrics import table
from ...logic.metrics.families import Family, Sample, families, render
from ...logic.metrics.view import ServerNow, gather
from ...process import reading
from .probe import NotFound, engine_cores, environ_of, listening_pid, probe

#: what the text says when the engine keeps no figures
NO_FIGURES = ("no engine figures here: turn them on with ENGINEDEAD_METRICS=1 (or the guard, "
              "ENGINEDEAD_GUARD=1) in the server's environment")


def server_figures(port: int | None = None, pid: int | None = None) -> ServerNow | None:
    """The figures of the server on ``port`` (or serving process ``pid``); None when its engine keeps none."""
    try:
        front = psutil.Process(pid if pid is not None else listening_pid(port if port is not None else 8000))
    except (NotFound, psutil.Error):
        return None
    cores = [c for c in engine_cores(front) if reading.alive(c)]
    live = {c.pid for c in cores}
    for core in cores:
        environ = environ_of(core)
        directory = metrics_dir(environ)
        found = record_of(directory, core.pid)
        if found is None:
            continue
        key, _ = found
        return gather(directory, key, lambda c: c.pid in live, state_dir(environ), time.monotonic(),
                      machine.installed("pytest-enginedead") or "unknown",
                      machine.installed(*machine.VLLM_DISTS) or "unknown")
    return None


def prometheus_text(port: int | None = None, pid: int | None = None) -> tuple[str, bool]:
    """(the text, the probe's answer: alive or not).  Without figures the text says why in a comment
    (which Prometheus' parsers skip) and holds ``enginedead_probe_alive`` alone."""
    answer = probe(port=port, pid=pid)
    found = None
    with contextlib.suppress(psutil.Error, OSError):
        found = server_figures(port, pid)
    alive = Family(table.PROBE_ALIVE, (Sample(table.PROBE_ALIVE.name, (), float(answer.alive)),))
    text = render([*(families(found) if found is not None else []), alive])
    if found is not None:
        return text, answer.alive
    why = NO_FIGURES if answer.alive else answer.reason
    return f"# enginedead: {why}\n{text}", answer.alive
