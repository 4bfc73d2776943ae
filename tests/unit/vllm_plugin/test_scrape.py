"""The serving process's side of the metrics, without a server: the collector on vLLM's registry
(one API server) and on the registry vLLM builds per API server over ``PROMETHEUS_MULTIPROC_DIR``
(several), the same figures as ``enginedead probe --prometheus`` prints, and a scrape that never
waits on the engine."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import struct
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from pytest_enginedead.compat import in_server  # noqa: E402
from pytest_enginedead.contract import metricsfile as mf  # noqa: E402
from pytest_enginedead.contract.decisions import GuardAction, Verdict  # noqa: E402
from pytest_enginedead.contract.metricstotals import StepPhase  # noqa: E402
from pytest_enginedead.logic.metrics.families import families, render  # noqa: E402
from pytest_enginedead.vllm_plugin import scrape  # noqa: E402

KEY = "p8123"


def record(directory: Path, front: int = 77) -> mf.CoreMetricsWriter:
    w = mf.CoreMetricsWriter(str(directory), KEY, front, True, True, 5.0, 2.0)
    w.set_ranks(0, [mf.RankSlot(0, os.getpid(), 0)])
    w.step_ends(StepPhase.FORWARD, 3.2, time.monotonic(), saved=True)
    w.decision(GuardAction.WAIT, Verdict.SLOW)
    w.step_begins(StepPhase.FORWARD, 2, 16, 770.0, 2.0, mf.DeadlineSource.POLICY, time.monotonic() - 1.0)
    return w


def collector(directory: Path, front: int = 77) -> scrape.EngineCollector:
    return scrape.EngineCollector(str(directory), KEY, front, str(directory), "0.32.0",
                                  alive=lambda pid: True)


def scraped(registry: Any) -> dict[str, float]:
    text = prometheus_client.generate_latest(registry).decode()
    return {f"{s.name}{sorted(s.labels.items())}": s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith("enginedead_")}


def test_the_collector_serves_what_the_engine_core_wrote_as_the_probe_prints_it(tmp_path: Path) -> None:
    record(tmp_path)
    ours = collector(tmp_path)
    registry = prometheus_client.CollectorRegistry()
    registry.register(ours)
    served = scraped(registry)
    assert served["enginedead_guard_decisions_total[('action', 'wait'), ('verdict', 'SLOW')]"] == 1
    assert served["enginedead_guard_saved_steps_total[]"] == 1
    assert served["enginedead_deadline_seconds[('source', 'policy')]"] == 770.0
    assert served["enginedead_step_batch[('engine', '0'), ('node', '0'), ('rank', '0')]"] == 16
    age = served["enginedead_step_age_seconds[('engine', '0'), ('node', '0'), ('rank', '0')]"]
    assert 1.0 <= age < 5.0
    # the probe's text (the same families, written by the plugin) says the same, bar the clock
    printed = {f"{s.name}{sorted(s.labels.items())}": s.value
               for family in text_string_to_metric_families(render(families(ours.now())))
               for s in family.samples}
    moving = ("age_seconds", "longest_seconds", "deadline_ratio", "stalled_seconds")
    assert {k: v for k, v in printed.items() if not any(m in k for m in moving)} == {
        k: v for k, v in served.items() if not any(m in k for m in moving)}


def test_only_this_servers_live_engine_cores_show_a_step_but_every_record_counts(tmp_path: Path) -> None:
    """A gone engine core (not yet folded) still counts; another front's engine core shows no gauge."""
    old = mf.CoreMetricsWriter(str(tmp_path), KEY, 66, True, True, 5.0, 2.0)
    old.step_failed(Verdict.HUNG)
    os.replace(old.path, mf.record_path(str(tmp_path), KEY, 999_999))
    record(tmp_path, front=77)
    ours = scrape.EngineCollector(str(tmp_path), KEY, 77, str(tmp_path), "0.32.0",
                                  alive=lambda pid: pid != 999_999)
    now = ours.now()
    assert len(now.engines) == 1 and now.totals.died(Verdict.HUNG) == 1
    other = scrape.EngineCollector(str(tmp_path), KEY, 55, str(tmp_path), "0.32.0", alive=lambda pid: True)
    assert other.now().engines == ()


def test_a_scrape_never_waits_on_the_engine(tmp_path: Path) -> None:
    """A writer stuck mid-write (its count odd for good) and a fold holding the server's lock: the
    scrape still answers, with the figures as they stand, within half a second: its own waits are
    0.05 s for the lock and 5 ms on the stuck record; the rest is room for a loaded 2-core box (a
    tenth of a second failed there, niced beside a soak), far below a wait on the writer (forever)
    or on the fold (2 s)."""
    w = record(tmp_path)
    with open(w.path, "r+b") as f:
        f.write(struct.pack("<q", 11))
    registry = prometheus_client.CollectorRegistry()
    registry.register(collector(tmp_path))
    with mf.shared(str(tmp_path), KEY, exclusive=True):
        t0 = time.monotonic()
        served = scraped(registry)
        assert time.monotonic() - t0 < 0.5
    assert served["enginedead_guard_saved_steps_total[]"] == 1


def test_a_failing_read_leaves_vllms_metrics_alone_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(scrape, "gather", broken)
    registry = prometheus_client.CollectorRegistry()
    registry.register(collector(tmp_path))
    with caplog.at_level(logging.ERROR, logger="vllm.enginedead"):
        for _ in range(3):
            assert scraped(registry) == {}
    assert caplog.text.count("reading the engine's figures") == 1


@pytest.fixture
def builder(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A stand-in for vLLM's registry builder: a fresh registry per call, as with several API servers;
    and a vLLM module that imported it by name, as vLLM's metrics route does."""
    module = types.ModuleType("vllm_enginedead_stand_in")
    module.get_prometheus_registry = lambda: prometheus_client.CollectorRegistry()  # type: ignore[attr-defined]
    route = types.ModuleType("vllm_enginedead_route")
    route.get_prometheus_registry = module.get_prometheus_registry  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(sys.modules, route.__name__, route)
    monkeypatch.setattr(in_server, "METRICS_REGISTRY", (module.__name__, "get_prometheus_registry"))
    return module, route


def test_the_collector_joins_every_registry_vllm_builds_for_metrics(tmp_path: Path, builder: Any) -> None:
    module, route = builder
    record(tmp_path)
    ours = collector(tmp_path)
    try:
        assert scrape.join_vllm_registry(ours)
        assert scrape.join_vllm_registry(ours)  # twice: once in each registry all the same
        for build in (module.get_prometheus_registry, route.get_prometheus_registry):
            assert scraped(build())["enginedead_guard_saved_steps_total[]"] == 1
        assert scraped(prometheus_client.REGISTRY)["enginedead_guard_saved_steps_total[]"] == 1
    finally:
        prometheus_client.REGISTRY.unregister(ours)


def test_the_serving_process_names_its_engine_cores_for_its_port() -> None:
    environ: dict[str, str] = {}
    scrape.name_engines(environ, ["/v/vllm/entrypoints/openai/api_server.py", "--port", "8123"])
    assert environ == {"ENGINEDEAD_METRICS_KEY": "p8123"}
    scrape.name_engines(environ, ["/v/vllm/entrypoints/openai/api_server.py", "--port", "9"])
    assert environ == {"ENGINEDEAD_METRICS_KEY": "p8123"}  # a key set (by the operator) stays
    offline: dict[str, str] = {}
    scrape.name_engines(offline, ["my_script.py"])
    assert offline == {"ENGINEDEAD_METRICS_KEY": f"f{os.getpid()}"}


def test_the_collector_registers_only_where_the_metrics_are_asked(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setattr(scrape, "join_vllm_registry", lambda c: True)
    assert scrape.register({"ENGINEDEAD_GUARD": "0"}) is None
    found = scrape.register({"ENGINEDEAD_METRICS": "1", "ENGINEDEAD_FRONT_PID": "4242",
                             "ENGINEDEAD_METRICS_KEY": "p1", "ENGINEDEAD_GUARD_STATE_DIR": str(tmp_path)})
    assert found is not None and (found.front, found.key, found.directory) == (4242, "p1", str(tmp_path))
    monkeypatch.setattr(scrape, "serving", lambda: False)
    assert scrape.register({"ENGINEDEAD_METRICS": "1"}) is None


SERVER = """
import json, os, sys
from prometheus_client import generate_latest
from pytest_enginedead.vllm_plugin import scrape
scrape.register()
from vllm.v1.metrics.prometheus import get_prometheus_registry
from prometheus_client import Counter
Counter("vllm_enginedead_probe_requests", "a metric of vLLM's own kind", ["server"]).labels(sys.argv[1]).inc()
print(json.dumps(generate_latest(get_prometheus_registry()).decode()))
"""


@pytest.mark.processes
def test_several_api_servers_over_prometheus_multiproc_dir_serve_the_same_figures(tmp_path: Path) -> None:
    """vLLM with ``--api-server-count 2`` serves ``/metrics`` from a fresh registry per API server over
    ``PROMETHEUS_MULTIPROC_DIR``: each of two API server processes (vLLM's own registry builder, its
    multiprocess collector) serves the engine's figures once, the same in both, beside vLLM's own
    metrics, which both processes' counts reach."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    multiproc = tmp_path / "prom"
    multiproc.mkdir()
    record(tmp_path, front=os.getpid())
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc), "ENGINEDEAD_METRICS": "1",
           "ENGINEDEAD_FRONT_PID": str(os.getpid()), "ENGINEDEAD_METRICS_KEY": KEY,
           "ENGINEDEAD_GUARD_STATE_DIR": str(tmp_path), "VLLM_NO_USAGE_STATS": "1"}
    texts = []
    for name in ("a", "b"):
        done = subprocess.run([sys.executable, "-c", SERVER, name], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        texts.append(json.loads(done.stdout.strip().splitlines()[-1]))
    ours = [sorted(line for line in t.splitlines() if line.startswith("enginedead_")
                   and "age_seconds" not in line and "longest" not in line and "ratio" not in line
                   and "stalled" not in line) for t in texts]
    assert ours[0] == ours[1] and ours[0]
    assert sum(line.startswith("enginedead_guard_saved_steps_total ") for line in ours[0]) == 1
    assert 'vllm_enginedead_probe_requests_total{server="a"} 1.0' in texts[1]  # vLLM's side, both processes
