"""The plugin's metric families: Prometheus' naming conventions kept by every definition, the
families built from a server's figures, and the text a node exporter reads."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.contract.metricsfile import DeadlineSource
from pytest_enginedead.contract.metricstotals import BUCKETS, Histogram, Totals
from pytest_enginedead.logic.metrics import table
from pytest_enginedead.logic.metrics.families import families, render
from pytest_enginedead.logic.metrics.view import EngineNow, RankNow, ServerNow

#: the labels a family may carry: each of few values (never a pid, a request, a model path)
LOW_CARDINALITY = {"phase", "source", "action", "verdict", "engine", "rank", "node", "version", "vllm"}


@pytest.mark.parametrize("metric", table.METRICS, ids=lambda m: m.name)
def test_every_family_keeps_prometheus_naming_conventions(metric: table.Metric) -> None:
    assert re.fullmatch(r"enginedead_[a-z_]+", metric.name), "one prefix, snake case"
    assert set(metric.labels) <= LOW_CARDINALITY, f"labels of low cardinality only: {metric.labels}"
    assert len(metric.help) > 20 and metric.help.endswith((".", ")")), "help a person can read"
    if metric.kind is table.Kind.COUNTER:
        assert not metric.name.endswith("_total") and metric.exposed == f"{metric.name}_total"
    else:
        assert not metric.exposed.endswith("_total")
    if metric.kind is table.Kind.HISTOGRAM or "seconds" in metric.name:
        assert metric.name.endswith("_seconds"), "durations in base units, named so"
    assert not re.search(r"_(ms|milliseconds|minutes|hours)\b", metric.name)


def server(engines: tuple[EngineNow, ...] = ()) -> ServerNow:
    forward = Histogram((0, 0, 0, 0, 0, 0, 2) + (0,) * (BUCKETS - 8) + (1,), 7200.8)
    totals = Totals((forward, Histogram()), saved=1, deaths=(0, 1, 0),
                    decisions=tuple(3 if (a, v) == (GuardAction.WAIT, Verdict.SLOW) else 0
                                    for a in GuardAction for v in Verdict))
    return ServerNow(totals, engines, "0.2.0", "0.32.0")


ENGINE = EngineNow(True, True, 5.0, 1240.0, 2.0, DeadlineSource.POLICY, 310.0, 1.7e9, (
    RankNow(0, 0, 0, 12.5, 64, 3, 12, 40.0, 0.4), RankNow(0, 1, 0, 12.5, 64, 3, 12, None, 0.4)))


def samples(server_now: ServerNow) -> dict[str, float]:
    return {f"{s.name}{dict(s.labels)}": s.value for f in families(server_now) for s in f.samples}


def test_counters_are_there_before_their_first_count_and_gauges_only_with_an_engine() -> None:
    """Every decision, death and phase series exists at 0 before its first count (a rate is never a
    missing series); without a live engine core, no engine gauge pretends to know its step."""
    found = samples(server())
    assert found["enginedead_guard_decisions_total{'action': 'wait', 'verdict': 'SLOW'}"] == 3
    assert found["enginedead_guard_decisions_total{'action': 'end', 'verdict': 'HUNG'}"] == 0
    assert len([k for k in found if k.startswith("enginedead_guard_decisions_total")]) == 15
    assert found["enginedead_engine_deaths_total{'verdict': 'HUNG'}"] == 1
    assert found["enginedead_guard_saved_steps_total{}"] == 1
    assert found["enginedead_step_duration_seconds_count{'phase': 'forward'}"] == 3
    assert found["enginedead_step_duration_seconds_bucket{'phase': 'forward', 'le': '0.5'}"] == 2
    assert found["enginedead_step_duration_seconds_bucket{'phase': 'forward', 'le': '7200.0'}"] == 2
    assert found["enginedead_step_duration_seconds_bucket{'phase': 'forward', 'le': '+Inf'}"] == 3
    assert found["enginedead_step_duration_seconds_count{'phase': 'sampling'}"] == 0
    assert not [k for k in found if k.startswith(("enginedead_deadline", "enginedead_step_age",
                                                  "enginedead_guard_enabled"))]


def test_a_live_engine_shows_its_deadline_its_headroom_and_each_ranks_step() -> None:
    found = samples(server((ENGINE,)))
    assert found["enginedead_deadline_seconds{'source': 'policy'}"] == 1240.0
    assert found["enginedead_stock_deadline_seconds{}"] == 2.0
    assert found["enginedead_step_deadline_ratio{}"] == pytest.approx(310.0 / 1240.0)
    assert found["enginedead_guard_hang_seconds{}"] == 5.0 and found["enginedead_guard_enabled{}"] == 1
    rank0 = "{'engine': '0', 'rank': '0', 'node': '0'}"
    assert (found[f"enginedead_step_age_seconds{rank0}"], found[f"enginedead_step_layer{rank0}"],
            found[f"enginedead_step_remaining_seconds{rank0}"]) == (12.5, 3, 40.0)
    # rank 1's end is not known: its series is absent, not 0 (which would read as "ends now")
    assert "enginedead_step_remaining_seconds{'engine': '0', 'rank': '1', 'node': '0'}" not in found
    off = samples(server((EngineNow(False, True, 0.0, 2.0, 2.0, DeadlineSource.STOCK, 0.0, 1.0, ()),)))
    assert off["enginedead_guard_enabled{}"] == 0 and off["enginedead_guard_requested{}"] == 1
    assert "enginedead_guard_hang_seconds{}" not in off


def test_the_text_names_help_and_type_once_per_family_and_escapes_labels() -> None:
    text = render(families(server((ENGINE,))))
    assert text.count("# TYPE enginedead_guard_decisions_total counter") == 1
    assert "# TYPE enginedead_step_duration_seconds histogram" in text
    assert 'enginedead_step_age_seconds{engine="0",rank="0",node="0"} 12.5\n' in text
    assert 'enginedead_step_duration_seconds_bucket{phase="forward",le="+Inf"} 3.0\n' in text
    odd = ServerNow(Totals(), (), 'a"b\\c\nd', "0.32.0")
    assert 'version="a\\"b\\\\c\\nd"' in render(families(odd))


@pytest.mark.processes
def test_promtool_reads_the_text_as_valid_metrics(tmp_path: Path) -> None:
    """Prometheus' own linter on the text ``enginedead probe --prometheus`` prints."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package: prometheus)")
    text = render(families(server((ENGINE,))))
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
