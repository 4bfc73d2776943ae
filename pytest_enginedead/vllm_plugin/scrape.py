"""In the serving process (vLLM's API server): the plugin's families on vLLM's own ``/metrics``.

A prometheus_client collector that, at each scrape, reads the engine cores' records and their
workers' progress records (``logic.metrics.view.gather``: files only, never the engine) and yields
the families of ``logic.metrics.table``.  It joins the registry vLLM serves: prometheus_client's
default one with one API server, and — with several (``--api-server-count``, vLLM's
``PROMETHEUS_MULTIPROC_DIR``) — the fresh one vLLM builds for ``/metrics`` in each API server
process (``compat.in_server.METRICS_REGISTRY``).  Whichever API server answers a scrape reads the
same engine records, so every answer counts the same.  vLLM's own metrics are not touched.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..compat import in_server, versions
from ..contract.guardfiles import state_dir
from ..contract.metricsfile import CoreMetrics, metrics_dir
from ..contract.names import ENV_FRONT_PID, METRICS_KEY_ENV
from ..logic import machine
from ..logic.inputs.guardconfig import metrics_from_env, serving_port
from ..logic.metrics.families import Family, families
from ..logic.metrics.table import METRICS
from ..logic.metrics.view import ServerNow, gather
from ..process import reading

logger = logging.getLogger("vllm.enginedead")


def serving() -> bool:
    """This process serves vLLM's API: the main process, or one of several API server processes."""
    name = multiprocessing.current_process().name
    return name == "MainProcess" or name.startswith(in_server.API_SERVER_PROCESS_PREFIX)


def name_engines(environ: dict[str, str] | Any, argv: list[str]) -> None:
    """In the process that starts the engine cores: tell them whose figures they keep (its port: the
    same server after a restart), unless a key is set already."""
    if environ.get(METRICS_KEY_ENV):
        return
    port = serving_port(argv)
    environ[METRICS_KEY_ENV] = f"p{port}" if port is not None else f"f{os.getpid()}"


class EngineCollector:
    """The plugin's families, read from the engine's records at each scrape."""

    def __init__(self, directory: str, key: str, front: int, layers_dir: str, vllm: str,
                 alive: Callable[[int], bool] = reading.pid_alive) -> None:
        self.directory, self.key, self.front, self.layers_dir = directory, key, front, layers_dir
        self.vllm = vllm
        self.version = machine.installed("pytest-enginedead") or "unknown"
        self._alive = alive
        self._failed = False

    def live(self, core: CoreMetrics) -> bool:
        """An engine core of this server that runs now (gone ones only count)."""
        return core.front == self.front and self._alive(core.pid)

    def now(self) -> ServerNow:
        return gather(self.directory, self.key, self.live, self.layers_dir, time.monotonic(), self.version,
                      self.vllm)

    def describe(self) -> list[Any]:
        """The families' names, for prometheus_client's registration (no file is read)."""
        from prometheus_client.metrics_core import Metric

        return [Metric(m.name, m.help, m.kind.value) for m in METRICS]

    def collect(self) -> Iterator[Any]:
        try:
            found = families(self.now())
        except Exception as exc:  # a scrape of vLLM's own metrics never fails for ours
            if not self._failed:
                self._failed = True
                logger.error("enginedead metrics: reading the engine's figures in %s failed (%s: %s); "
                             "/metrics goes on without them", self.directory, type(exc).__name__, exc)
            return
        for family in found:
            yield prometheus_family(family)


def prometheus_family(family: Family) -> Any:
    """A family as prometheus_client serves it."""
    from prometheus_client.metrics_core import Metric

    metric = Metric(family.metric.name, family.metric.help, family.metric.kind.value)
    for sample in family.samples:
        metric.add_sample(sample.name, dict(sample.labels), sample.value)
    return metric


def join_vllm_registry(collector: EngineCollector) -> bool:
    """Register the collector where vLLM's ``/metrics`` will look: the default registry now, and every
    registry vLLM builds for its route from here on.  Whether it could hook vLLM's builder."""
    from prometheus_client import REGISTRY

    with contextlib.suppress(ValueError):  # registered already
        REGISTRY.register(collector)
    module_name, attr = in_server.METRICS_REGISTRY
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False
    original = getattr(module, attr, None)
    if original is None or getattr(original, "__enginedead__", False):
        return original is not None

    def get_prometheus_registry(*args: Any, **kwargs: Any) -> Any:
        registry = original(*args, **kwargs)
        if registry is not REGISTRY:
            with contextlib.suppress(ValueError):
                registry.register(collector)
        return registry

    get_prometheus_registry.__enginedead__ = True  # type: ignore[attr-defined]
    for name, loaded in list(sys.modules.items()):  # modules that imported the builder by name
        if name.startswith("vllm") and getattr(loaded, attr, None) is original:
            setattr(loaded, attr, get_prometheus_registry)
    setattr(module, attr, get_prometheus_registry)
    return True


def register(environ: Mapping[str, str] | None = None) -> EngineCollector | None:
    """In a serving process with the metrics on: the collector, joined to vLLM's registry."""
    environ = os.environ if environ is None else environ
    if not serving():
        return None
    on, _ = metrics_from_env(environ)  # a bad value is said once, by the engine core
    if not on:
        return None
    front_raw = environ.get(ENV_FRONT_PID, "")
    front = int(front_raw) if front_raw.isdigit() else os.getpid()
    key = environ.get(METRICS_KEY_ENV) or f"f{front}"
    collector = EngineCollector(metrics_dir(environ), key, front, state_dir(environ),
                                versions.installed_version() or "unknown")
    if not join_vllm_registry(collector):
        logger.warning("enginedead metrics: this vLLM builds its /metrics registry elsewhere; the plugin's "
                       "figures are served with one API server only")
    return collector
