"""The alert rules and the dashboard shipped with the package: the files as the code writes them, the
rules checked and tested by Prometheus' own ``promtool`` (each rule fires on series written for it and
stays quiet on series beside them), every dashboard query over metrics the plugin serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_enginedead.logic.metrics import alerts, dashboard, table

MONITORING = Path(alerts.__file__).resolve().parents[2] / "monitoring"

PROMTOOL_MISSING = "promtool not found: install Debian's package `prometheus` (apt-get install prometheus)"


def test_the_shipped_files_are_what_the_code_writes() -> None:
    """``python tools/monitoring.py`` (``make docs-tables``) writes them; a stale one fails here."""
    shipped = {"enginedead-rules.yml": alerts.rules_file(),
               "enginedead-prometheusrule.yaml": alerts.prometheus_rule(),
               "enginedead-dashboard.json": dashboard.dashboard_file()}
    stale = [name for name, text in shipped.items() if (MONITORING / name).read_text() != text]
    assert stale == [], f"stale in {MONITORING}: {stale}; run `python tools/monitoring.py`"


def test_the_prometheusrule_holds_the_rules_file_groups_unchanged() -> None:
    rules = alerts.rules_file().splitlines()[1:]  # past the header
    kube = alerts.prometheus_rule().splitlines()
    spec = kube[kube.index("spec:") + 1:]
    assert spec == ["  " + line for line in rules]
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load(alerts.prometheus_rule())["spec"] == yaml.safe_load(alerts.rules_file())


def test_every_rule_has_a_runbook_section_and_reads_only_the_plugins_metrics() -> None:
    page = (Path(__file__).resolve().parents[4] / "docs" / "how-to" / "monitoring.md").read_text()
    for rule in alerts.RULES:
        assert f"### {rule.alert}" in page, f"docs/how-to/monitoring.md: no runbook section for {rule.alert}"
        assert rule.runbook.endswith(f"#{rule.alert.lower()}")
        assert metric_names(rule.expr) and metric_names(rule.expr) <= served(), rule.alert


# --- promtool -----------------------------------------------------------------------------------------


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip(PROMTOOL_MISSING)
    return found


A = {"job": "vllm", "instance": "a:8000"}  # the one each rule fires for
B = {"job": "vllm", "instance": "b:8000"}  # beside it, quiet
C = {"job": "vllm", "instance": "c:8000"}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def fired(rule_name: str, labels: dict[str, str], value: str = "", **extra: str) -> dict[str, Any]:
    """The alert promtool expects: its labels, its annotations expanded as Prometheus expands them."""
    rule = next(r for r in alerts.RULES if r.alert == rule_name)
    every = {**labels, **extra}
    text = rule.description.replace("{{ $value | humanizePercentage }}", value)
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: every[m.group(1)], text)
    return {"exp_labels": {**every, "severity": rule.severity.value},
            "exp_annotations": {"summary": rule.summary, "description": text, "runbook_url": rule.runbook}}


def case(rule: str, input_series: list[dict[str, str]], firing: list[dict[str, Any]],
         quiet_at: str = "0m", at: str = "3m") -> dict[str, Any]:
    """One test group: nothing fires at ``quiet_at`` (before its ``for``, or before the event); at
    ``at`` exactly ``firing`` fire (the series of B and C stay quiet)."""
    return {"interval": "1m", "input_series": input_series, "name": rule,
            "alert_rule_test": [{"eval_time": quiet_at, "alertname": rule, "exp_alerts": []},
                                {"eval_time": at, "alertname": rule, "exp_alerts": firing}]}


def cases() -> list[dict[str, Any]]:
    age = table.AGE.exposed
    ranks = {"engine": "0", "rank": "0", "node": "0"}
    return [
        case("EngineStepNearDeadline",
             [series(table.RATIO.exposed, A, "0.9x5"), series(table.RATIO.exposed, B, "0.5x5")],
             [fired("EngineStepNearDeadline", A, value="90%")]),
        case("EngineGuardWaitingPastStockDeadline",
             [series(age, {**A, **ranks}, "0 30x4"), series(table.STOCK_DEADLINE.exposed, A, "10x5"),
              series(age, {**B, **ranks}, "0 5x4"), series(table.STOCK_DEADLINE.exposed, B, "10x5"),
              series(table.DECISIONS.exposed, {**B, "action": "warn", "verdict": "HUNG"}, "0 0 1 1 1"),
              series(age, {**C, **ranks}, "0x5"), series(table.STOCK_DEADLINE.exposed, C, "10x5"),
              series(table.DECISIONS.exposed, {**C, "action": "wait", "verdict": "SLOW"}, "0 0 1 1 1")],
             [fired("EngineGuardWaitingPastStockDeadline", A),
              fired("EngineGuardWaitingPastStockDeadline", C)]),
        case("EngineHungStepEnded",
             [series(table.DECISIONS.exposed, {**A, "action": "end", "verdict": "HUNG"}, "0 0 1 1 1"),
              series(table.DECISIONS.exposed, {**A, "action": "wait", "verdict": "SLOW"}, "0 3 4 5 6"),
              series(table.DECISIONS.exposed, {**B, "action": "end", "verdict": "HUNG"}, "0x5")],
             [fired("EngineHungStepEnded", A, verdict="HUNG")]),
        case("EngineRestarted",
             [series(table.STARTED.exposed, A, "1000 1000 2000 2000 2000"),
              series(table.STARTED.exposed, B, "1000x5")],
             [fired("EngineRestarted", A)]),
        case("EngineGuardOffWhereAsked",
             [series(table.GUARD_REQUESTED.exposed, A, "1x5"), series(table.GUARD_ENABLED.exposed, A, "0x5"),
              series(table.GUARD_REQUESTED.exposed, B, "1x5"), series(table.GUARD_ENABLED.exposed, B, "1x5"),
              series(table.GUARD_REQUESTED.exposed, C, "0x5"), series(table.GUARD_ENABLED.exposed, C, "0x5")],
             [fired("EngineGuardOffWhereAsked", A)]),
    ]


@pytest.mark.processes
def test_promtool_checks_the_rules_file(tmp_path: Path) -> None:
    tool = promtool()
    done = subprocess.run([tool, "check", "rules", str(MONITORING / "enginedead-rules.yml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts.RULES)} rules found" in done.stdout


@pytest.mark.processes
def test_promtool_tests_each_rule_firing_and_quiet(tmp_path: Path) -> None:
    """``promtool test rules`` over one group of series per rule (a JSON file is YAML)."""
    tool = promtool()
    shutil.copy(MONITORING / "enginedead-rules.yml", tmp_path / "rules.yml")
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": cases()}
    (tmp_path / "tests.yml").write_text(json.dumps(tests, indent=1))
    done = subprocess.run([tool, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {c["name"] for c in tests["tests"]} == {r.alert for r in alerts.RULES}  # every rule tested


# --- the dashboard ------------------------------------------------------------------------------------

#: PromQL's words that are not metric names
PROMQL_WORDS = {"sum", "by", "without", "rate", "increase", "histogram_quantile", "changes", "max", "min",
                "avg", "and", "or", "unless", "on", "ignoring", "group_left", "group_right", "label_values",
                "le", "instance", "phase", "action", "verdict", "engine", "rank", "node", "source"}


def served() -> set[str]:
    """Every name a query may use: each family as exposed, a histogram's series too."""
    names = {m.exposed for m in table.METRICS}
    names |= {f"{table.STEP_DURATION.name}_{part}" for part in ("bucket", "count", "sum")}
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a query reads: its words outside strings, braces and ranges, less PromQL's own."""
    bare = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]', " ", expr)
    return {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare) if w not in PROMQL_WORDS}


def test_every_dashboard_query_reads_only_metrics_the_plugin_serves() -> None:
    board = json.loads((MONITORING / "enginedead-dashboard.json").read_text())
    exprs = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    exprs += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    assert len(exprs) >= len(dashboard.PANELS)
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"{expr!r} reads no metric"
        assert names <= served(), f"{expr!r} reads {sorted(names - served())}: not served by the plugin"
