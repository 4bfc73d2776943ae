"""The Grafana dashboard shipped with the package, defined once over the families of ``table``.

Each panel's queries name only metrics the plugin serves (a unit test reads them); the engine test
runs each against a real Prometheus scraping a guarded server and expects series back.  Grafana's
variables in a query: ``$datasource`` (a Prometheus data source), ``$instance`` (the scraped API
servers), ``$__rate_interval``.  ``tools/monitoring.py`` writes ``pytest_enginedead/monitoring/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from . import table as t
from .alerts import NEAR_SHARE

#: the instance selector every query carries
SEL = 'instance=~"$instance"'

#: Grafana's variables, as the engine test replaces them to run a query on Prometheus itself
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$instance": ".*"}


@dataclass(frozen=True)
class Panel:
    """One time-series panel: its title, what it shows, its queries (PromQL, legend) and unit."""

    title: str
    description: str
    queries: tuple[tuple[str, str], ...]
    unit: str = "short"


PANELS: tuple[Panel, ...] = (
    Panel("Longest step against the deadline",
          f"The longest step of the last 10 minutes over the deadline in force; the alert fires at "
          f"{NEAR_SHARE:g}.",
          ((f"{t.RATIO.exposed}{{{SEL}}}", "{{instance}}"),), "percentunit"),
    Panel("Step in flight and the deadlines",
          "How long each rank's step has run, against vLLM's own deadline and the deadline in force.",
          ((f"{t.AGE.exposed}{{{SEL}}}", "{{instance}} engine {{engine}} rank {{rank}} node {{node}}"),
           (f"{t.STOCK_DEADLINE.exposed}{{{SEL}}}", "vLLM's deadline"),
           (f"{t.DEADLINE.exposed}{{{SEL}}}", "deadline in force ({{source}})")), "s"),
    Panel("Step duration (p50, p99) by phase",
          "Engine steps timed from the RPC sent to its reply, by phase.",
          ((f"histogram_quantile(0.5, sum by (le, phase) (rate({t.STEP_DURATION.name}_bucket{{{SEL}}}"
            f"[$__rate_interval])))", "p50 {{phase}}"),
           (f"histogram_quantile(0.99, sum by (le, phase) (rate({t.STEP_DURATION.name}_bucket{{{SEL}}}"
            f"[$__rate_interval])))", "p99 {{phase}}")), "s"),
    Panel("Steps per second by phase", "Engine step RPCs answered, by phase.",
          ((f"sum by (phase) (rate({t.STEP_DURATION.name}_count{{{SEL}}}[$__rate_interval]))", "{{phase}}"),),
          "ops"),
    Panel("Guard's decisions", "What the guard did at vLLM's deadline and after it, by what it found.",
          ((f"sum by (action, verdict) (increase({t.DECISIONS.exposed}{{{SEL}}}[$__rate_interval]))",
            "{{action}} {{verdict}}"),)),
    Panel("Steps saved and engine deaths",
          "Steps that outlived vLLM's deadline and returned because the guard waited; deaths by verdict.",
          ((f"sum(increase({t.SAVED.exposed}{{{SEL}}}[$__rate_interval]))", "saved"),
           (f"sum by (verdict) (increase({t.DEATHS.exposed}{{{SEL}}}[$__rate_interval]))",
            "died {{verdict}}"))),
    Panel("Step progress by rank", "Layers of the step in flight finished, of the model's layers, and the "
          "batch it runs.",
          ((f"{t.LAYER.exposed}{{{SEL}}}", "layer, rank {{rank}} node {{node}}"),
           (f"{t.LAYERS.exposed}{{{SEL}}}", "layers, rank {{rank}} node {{node}}"),
           (f"{t.BATCH.exposed}{{{SEL}}}", "batch, rank {{rank}} node {{node}}"))),
    Panel("Guard on, guard asked for, restarts",
          "1 when the guard runs; 1 when ENGINEDEAD_GUARD asks for it; the engine core's start time changes "
          "at a restart.",
          ((f"{t.GUARD_ENABLED.exposed}{{{SEL}}}", "guard on {{instance}}"),
           (f"{t.GUARD_REQUESTED.exposed}{{{SEL}}}", "guard asked {{instance}}"),
           (f"changes({t.STARTED.exposed}{{{SEL}}}[$__rate_interval])", "restarts {{instance}}"))),
)


def queries() -> list[str]:
    """Every panel's every query, as Grafana sends it."""
    return [expr for panel in PANELS for expr, _ in panel.queries]


def _panel(i: int, panel: Panel) -> dict[str, Any]:
    targets = [{"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
                "datasource": {"type": "prometheus", "uid": "${datasource}"}}
               for j, (expr, legend) in enumerate(panel.queries)]
    return {"id": i + 1, "type": "timeseries", "title": panel.title, "description": panel.description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": targets}


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana imports it (Dashboards > New > Import)."""
    variables = [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
        {"name": "instance", "label": "API server", "type": "query", "multi": True, "includeAll": True,
         "datasource": {"type": "prometheus", "uid": "${datasource}"}, "refresh": 2,
         "query": {"query": f"label_values({t.BUILD.exposed}, instance)", "refId": "instance"},
         "definition": f"label_values({t.BUILD.exposed}, instance)"},
    ]
    return {"title": "vLLM engine steps and the deadline (pytest-enginedead)", "uid": "enginedead",
            "tags": ["vllm", "enginedead"], "timezone": "", "schemaVersion": 39, "version": 1,
            "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
            "templating": {"list": variables},
            "panels": [_panel(i, p) for i, p in enumerate(PANELS)]}


def dashboard_file() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"
