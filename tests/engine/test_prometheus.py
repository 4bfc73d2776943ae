"""A real Prometheus in the proof: it scrapes a guarded API server through a slow window and records
what the server counted (the guard's waits, the steps), every dashboard query returns series, and the
shipped rules fire where they should (``examples/prometheus``)."""

from __future__ import annotations

import shutil

import psutil
import pytest

from pytest_enginedead.harness.probing.promserver import MISSING
from tests.support import examples
from tests.support.downstream import Downstream, assert_nothing_left, engine_processes

pytestmark = pytest.mark.engine

def test_prometheus_records_what_the_guarded_server_counted(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    if shutil.which("prometheus") is None:
        pytest.skip(MISSING)
    result = downstream.copy(examples.PROMETHEUS).run("-rA", "-s", plugins=["timeout"], in_subprocess=True,
                                                      report=True)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["prometheus: * forward steps, * waits, * saved, * dashboard queries with "
                                 "series; firing [[]'EngineGuardWaitingPastStockDeadline'[]]; "
                                 "* scrapes answered;*"])
    data = result.report
    assert data is not None and data["engines_started"] == 1
    assert_nothing_left(*engine_processes(data), bystander)
    leftover = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "prometheus"
                and p.ppid() == 1 and p.create_time() > bystander.create_time()]
    assert leftover == [], f"a Prometheus outlived its test: {leftover}"
