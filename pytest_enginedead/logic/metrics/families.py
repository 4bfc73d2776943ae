"""A server's figures as metric families (``table.METRICS``), and as Prometheus' text format.

One function builds the families from a ``ServerNow``; the serving process hands them to
prometheus_client (vLLM's ``/metrics``), ``enginedead probe --prometheus`` prints them with
``render`` (the text format 0.0.4 a node exporter's textfile collector reads).  The counters are
always there, every label value at 0 before its first count, so a rate is never a missing series;
the engine's gauges only while an engine core runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ...contract.decisions import GuardAction, Verdict
from ...contract.metricstotals import StepPhase
from . import table as t
from .view import EngineNow, RankNow, ServerNow

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    name: str  # the sample's own name: ``..._bucket``, ``..._total``
    labels: Labels
    value: float


@dataclass(frozen=True)
class Family:
    metric: t.Metric
    samples: tuple[Sample, ...]


def _histograms(server: ServerNow) -> Family:
    out = []
    for phase in StepPhase:
        hist = server.totals.steps[phase]
        labels = (("phase", phase.label),)
        for bound, n in hist.cumulative():
            out.append(Sample(f"{t.STEP_DURATION.name}_bucket", (*labels, ("le", _number(bound))), n))
        out.append(Sample(f"{t.STEP_DURATION.name}_sum", labels, hist.sum_s))
        out.append(Sample(f"{t.STEP_DURATION.name}_count", labels, hist.count))
    return Family(t.STEP_DURATION, tuple(out))


def _counters(server: ServerNow) -> list[Family]:
    totals = server.totals
    decisions = tuple(
        Sample(t.DECISIONS.exposed, (("action", a.value), ("verdict", v.name)), totals.decided(a, v))
        for a in GuardAction for v in Verdict)
    deaths = tuple(Sample(t.DEATHS.exposed, (("verdict", v.name),), totals.died(v)) for v in Verdict)
    return [Family(t.DECISIONS, decisions), Family(t.SAVED, (Sample(t.SAVED.exposed, (), totals.saved),)),
            Family(t.DEATHS, deaths)]


def _gauge(metric: t.Metric, value: float, labels: Labels = ()) -> Family:
    return Family(metric, (Sample(metric.name, labels, value),))


def _engine(e: EngineNow) -> list[Family]:
    out = [_gauge(t.DEADLINE, e.deadline_s, (("source", e.source.label),)),
           _gauge(t.STOCK_DEADLINE, e.stock_deadline_s), _gauge(t.LONGEST, e.longest_s),
           _gauge(t.RATIO, e.ratio), _gauge(t.GUARD_ENABLED, float(e.guard)),
           _gauge(t.GUARD_REQUESTED, float(e.asked)), _gauge(t.STARTED, e.started)]
    if e.guard:
        out.append(_gauge(t.GUARD_HANG, e.hang_s))
    return out


def _ranks(ranks: Iterable[RankNow]) -> list[Family]:
    shown = (t.AGE, t.BATCH, t.LAYER, t.LAYERS, t.REMAINING, t.STALLED)
    per: dict[str, list[Sample]] = {m.name: [] for m in shown}
    for r in ranks:
        labels = (("engine", str(r.engine)), ("rank", str(r.rank)), ("node", str(r.node)))
        for metric, value in ((t.AGE, r.age_s), (t.BATCH, r.batch), (t.LAYER, r.layer), (t.LAYERS, r.layers),
                              (t.REMAINING, r.remaining_s), (t.STALLED, r.stalled_s)):
            if value is not None:
                per[metric.name].append(Sample(metric.name, labels, float(value)))
    return [Family(m, tuple(per[m.name])) for m in shown if per[m.name]]


def families(server: ServerNow) -> list[Family]:
    """Every family with samples now, in ``table.METRICS`` order.  With several engine cores (data
    parallelism) the engine's gauges are the first one's, the longest step the longest of any."""
    found = [_histograms(server), *_counters(server),
             _gauge(t.BUILD, 1.0, (("version", server.version), ("vllm", server.vllm)))]
    if server.engines:
        first = server.engines[0]
        found += _engine(replace(first, longest_s=max(e.longest_s for e in server.engines)))
        found += _ranks(r for e in server.engines for r in e.ranks)
    order = {m.name: i for i, m in enumerate(t.METRICS)}
    return sorted(found, key=lambda f: order[f.metric.name])


def _number(value: float) -> str:
    """A value as Prometheus writes it: ``+Inf``, ``NaN``, whole numbers without a point."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(found: Iterable[Family]) -> str:
    """The families in Prometheus' text format 0.0.4 (what a node exporter's textfile collector reads)."""
    lines = []
    for family in found:
        m = family.metric
        lines.append(f"# HELP {m.exposed} {m.help.replace(chr(92), chr(92) * 2)}")
        lines.append(f"# TYPE {m.exposed} {m.kind.value}")
        for s in family.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels)
            name = f"{s.name}{{{labels}}}" if labels else s.name
            lines.append(f"{name} {_number(s.value)}")
    return "\n".join(lines) + "\n" if lines else ""
