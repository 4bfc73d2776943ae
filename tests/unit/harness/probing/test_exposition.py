"""``enginedead probe --prometheus``: the families vLLM's ``/metrics`` serves, read by the probe from
the records below the port it was pointed at, as text a node exporter's textfile collector reads."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from pytest_enginedead import command
from pytest_enginedead.contract import metricsfile as mf
from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.contract.metricstotals import StepPhase
from pytest_enginedead.harness.probing import exposition, probe
from pytest_enginedead.logic.metrics import table
from tests.support.standins import free_port
from tests.unit.harness.probing.test_probe import server_tree  # noqa: F401  (the fixture)

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def parsed(text: str) -> dict[str, float]:
    return {f"{s.name}{sorted(s.labels.items())}": s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_without_a_server_the_text_says_why_and_the_probe_answers_dead(
    capsys: pytest.CaptureFixture[str]
) -> None:
    nobody = free_port()
    assert command.main(["probe", "--prometheus", "--port", str(nobody)]) == 0  # printed: the file is good
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"# enginedead: dead: nothing listens on port {nobody}"
    assert parsed(out) == {"enginedead_probe_alive[]": 0.0}
    with pytest.raises(SystemExit) as info:
        command.main(["probe", "--prometheus", "--json"])
    assert info.value.code == 2


def test_a_record_elsewhere_is_not_this_cores() -> None:
    assert mf.record_of("/nonexistent", 12) is None


def test_record_of_finds_a_cores_record_by_pid_alone(tmp_path: Path) -> None:
    (tmp_path / f"{mf.PREFIX}p8000-12").touch()
    (tmp_path / f"{mf.PREFIX}p8000-123").touch()
    (tmp_path / f"{mf.PREFIX}p8000.carried.json").touch()
    assert mf.record_of(str(tmp_path), 12) == ("p8000", str(tmp_path / f"{mf.PREFIX}p8000-12"))
    assert mf.record_of(str(tmp_path), 23) is None


@pytest.mark.processes
def test_the_probe_prints_the_engines_figures_found_from_its_port(
    server_tree: tuple[psutil.Process, int, Path]  # noqa: F811
) -> None:
    front, port, directory = server_tree
    (core,) = probe.engine_cores(front)
    (worker,) = probe.workers(core)
    text, alive = exposition.prometheus_text(port=port)
    assert alive and text.startswith(f"# enginedead: {exposition.NO_FIGURES}\n")  # no record yet
    w = mf.CoreMetricsWriter(str(directory), "p8123", front.pid, True, True, 5.0, 2.0)
    w.set_ranks(0, [mf.RankSlot(0, worker.pid, 0)])
    w.step_ends(StepPhase.FORWARD, 3.2, time.monotonic(), saved=True)
    w.decision(GuardAction.WAIT, Verdict.SLOW)
    w.step_begins(StepPhase.FORWARD, 2, 16, 770.0, 2.0, mf.DeadlineSource.POLICY, time.monotonic() - 1.0)
    os.replace(w.path, mf.record_path(str(directory), "p8123", core.pid))  # as the engine core's own
    text, alive = exposition.prometheus_text(port=port)
    figures = parsed(text)
    assert alive and figures["enginedead_probe_alive[]"] == 1.0
    assert figures["enginedead_guard_decisions_total[('action', 'wait'), ('verdict', 'SLOW')]"] == 1
    assert figures["enginedead_guard_saved_steps_total[]"] == 1
    assert figures["enginedead_step_duration_seconds_count[('phase', 'forward')]"] == 1
    assert figures["enginedead_deadline_seconds[('source', 'policy')]"] == 770.0
    assert figures["enginedead_step_batch[('engine', '0'), ('node', '0'), ('rank', '0')]"] == 16
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {m.name for m in table.PROBE_ONLY} <= names
    assert "\nenginedead_guard_saved_steps_total 1.0\n" in exposition.prometheus_text(pid=front.pid)[0]
