"""The alert rules shipped with the package, defined once: as a Prometheus rules file and as the same
rules in a Kubernetes ``PrometheusRule`` (the Prometheus operator's), both written from here.

Every rule reads only the families of ``table``; each carries a runbook annotation pointing at its
section of the how-to "Monitor the deadline with Prometheus".  ``promtool test rules`` checks each
fires and stays quiet on series written for it (``tests/unit/logic/metrics``); ``tools/monitoring.py``
writes the files into ``pytest_enginedead/monitoring/``, a test fails when they are stale.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from . import table as t

#: a step past this share of the deadline in force raises ``EngineStepNearDeadline``
NEAR_SHARE = 0.8

#: how far back a counted decision or restart keeps its alert firing
RECENT = "15m"

#: where each runbook is: the how-to page of the docs (``docs/how-to/monitoring.md``), by its anchor
RUNBOOK_PAGE = "how-to/monitoring/"

GROUP = "enginedead"


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True)
class Rule:
    """One alerting rule."""

    alert: str
    expr: str
    wait: str  # its ``for``: how long the condition holds before it fires ("0m": at once)
    severity: Severity
    summary: str
    description: str

    @property
    def runbook(self) -> str:
        """Its section of the docs, relative to the site's root (the page's heading is the alert's name)."""
        return f"{RUNBOOK_PAGE}#{self.alert.lower()}"


RULES: tuple[Rule, ...] = (
    Rule("EngineStepNearDeadline",
         f"{t.RATIO.exposed} > {NEAR_SHARE:g}",
         "1m", Severity.WARNING,
         f"A vLLM engine step ran past {NEAR_SHARE:.0%} of the deadline in force",
         "The longest step of the last 10 minutes on {{ $labels.instance }} reached "
         "{{ $value | humanizePercentage }} of the deadline it dies at: steps are creeping toward a false "
         "death (batch, context, a slower host)."),
    Rule("EngineGuardWaitingPastStockDeadline",
         f"max without (engine, rank, node) ({t.AGE.exposed}) > {t.STOCK_DEADLINE.exposed} "
         f"or sum without (action, verdict) "
         f"(increase({t.DECISIONS.exposed}{{action=\"wait\"}}[{RECENT}])) > 0",
         "0m", Severity.WARNING,
         "The guard waited on a step past vLLM's own deadline",
         "A step on {{ $labels.instance }} ran past VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS while its workers "
         "computed: stock vLLM would have declared the engine dead. The guard kept it alive; the deadline is "
         "too short for this load."),
    Rule("EngineHungStepEnded",
         f"sum without (action) (increase({t.DECISIONS.exposed}{{action=\"end\"}}[{RECENT}])) > 0",
         "0m", Severity.CRITICAL,
         "The guard ended a hung engine step",
         "On {{ $labels.instance }} a step's workers showed no work for the guard's hang_s (verdict "
         "{{ $labels.verdict }}): the guard ended the wait and the engine died of it, a genuine death."),
    Rule("EngineRestarted",
         f"changes({t.STARTED.exposed}[{RECENT}]) > 0",
         "0m", Severity.WARNING,
         "The vLLM engine core restarted",
         "The engine core on {{ $labels.instance }} started again in the last 15 minutes; "
         f"{t.DEATHS.exposed} by verdict says what it died of (SLOW: a false death)."),
    Rule("EngineGuardOffWhereAsked",
         f"{t.GUARD_REQUESTED.exposed} == 1 and {t.GUARD_ENABLED.exposed} == 0",
         "1m", Severity.WARNING,
         "ENGINEDEAD_GUARD asks for the guard but it does not run",
         "On {{ $labels.instance }} the guard refused a bad setting and the engine runs stock: a slow step "
         "dies at vLLM's deadline. Its ERROR line in vLLM's log says which setting."),
)


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar (a JSON string is one)."""
    return json.dumps(text, ensure_ascii=False)


def _rule_lines(rule: Rule, indent: str) -> list[str]:
    return [f"{indent}- alert: {rule.alert}",
            f"{indent}  expr: {_quoted(rule.expr)}",
            f"{indent}  for: {rule.wait}",
            f"{indent}  labels:",
            f"{indent}    severity: {rule.severity.value}",
            f"{indent}  annotations:",
            f"{indent}    summary: {_quoted(rule.summary)}",
            f"{indent}    description: {_quoted(rule.description)}",
            f"{indent}    runbook_url: {_quoted(rule.runbook)}"]


def _groups(indent: str) -> list[str]:
    lines = [f"{indent}groups:", f"{indent}  - name: {GROUP}", f"{indent}    rules:"]
    for rule in RULES:
        lines += _rule_lines(rule, indent + "      ")
    return lines


HEADER = ("# pytest-enginedead's alert rules, written by tools/monitoring.py from "
          "pytest_enginedead/logic/metrics/alerts.py")


def rules_file() -> str:
    """The rules as a Prometheus rules file (``rule_files:`` in prometheus.yml)."""
    return "\n".join([HEADER, *_groups("")]) + "\n"


def prometheus_rule(name: str = "enginedead", namespace: str | None = None) -> str:
    """The same rules as a Kubernetes ``PrometheusRule`` (monitoring.coreos.com/v1)."""
    meta = [f"  name: {name}"] + ([f"  namespace: {namespace}"] if namespace else [])
    lines = [HEADER, "apiVersion: monitoring.coreos.com/v1", "kind: PrometheusRule", "metadata:", *meta,
             "  labels:", "    app.kubernetes.io/part-of: pytest-enginedead", "spec:", *_groups("  ")]
    return "\n".join(lines) + "\n"
