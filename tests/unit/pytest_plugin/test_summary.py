"""What the run found, for the person at the terminal and the JSON report: the summary, the
fingerprint in the report, a run without engines."""

from __future__ import annotations

import json

from pytest_enginedead.contract.control import Injection
from pytest_enginedead.contract.decisions import Verdict
from pytest_enginedead.harness.engines.offline import Engine
from pytest_enginedead.harness.engines.pool import EngineRecord
from pytest_enginedead.harness.judging.liveness import LivenessSettings
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.machine import Machine, same_machine, this_machine
from pytest_enginedead.logic.planning.engines import DeadlineAndFaults
from pytest_enginedead.logic.reporting.report import Results
from pytest_enginedead.logic.timeouts.policies import TimeoutPolicy
from pytest_enginedead.pytest_plugin import summary
from pytest_enginedead.pytest_plugin.options import Settings
from pytest_enginedead.pytest_plugin.summary import report_json
from tests.support import examples
from tests.support.downstream import Downstream, validated
from tests.support.records import finding, write_steps

# --- the JSON report --------------------------------------------------------------------------


def test_the_report_carries_the_fingerprint() -> None:
    settings = Settings(
        batch_sizes=(8,), model=BUNDLED_MODEL, model_source="bundled", policy=TimeoutPolicy.reference(),
        policy_name="reference", policy_source="default", policy_spec="reference", report=None,
        guard=False, liveness=LivenessSettings(), vllm_version=None,
    )
    data = json.loads(report_json(Results(), settings))
    assert validated(data) == data
    assert set(data["machine"]) == set(Machine.__annotations__)
    assert same_machine(data["machine"], this_machine())


def test_a_run_without_engines_writes_a_valid_report(downstream: Downstream) -> None:
    """A downstream run with no engine test still writes the report: nothing started."""
    out = downstream.copy(examples.PLAIN).run(report=True)
    out.assert_outcomes(passed=1)
    assert out.report is not None
    assert (out.report["engines_started"], out.report["engines"], out.report["tests"]) == (0, [], [])
    assert out.report["policy"] == {"name": "reference", "source": "default"}


# --- the terminal summary --------------------------------------------------------------------


class Terminal:
    """What ``terminal_summary`` writes to, at a verbosity."""

    def __init__(self, verbose: int) -> None:
        self.config = type("Config", (), {"getoption": lambda _self, name: verbose})()
        self.lines: list[str] = []

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(f"{sep * 3} {title} {sep * 3}")

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append(line)


def test_terminal_summary(engine: Engine) -> None:
    engine.instruct(DeadlineAndFaults(2.0, "the enginedead_timeout marker", Injection(slow_s_per_seq=0.05)))
    engine.start_s = 13.0
    engine.findings.append(finding(Verdict.SLOW))
    write_steps(engine, (1, 64, 1.0, 0.711), (2, 64, 2.0, 0.715))
    results = Results(lost_workers=["gw1"])
    results.add_engines([EngineRecord(engine.spec, engine)])
    quiet, full, none = Terminal(-1), Terminal(0), Terminal(0)
    summary.terminal_summary(quiet, results, "reference")
    summary.terminal_summary(full, results, "reference")
    summary.terminal_summary(none, Results(), "reference")
    assert quiet.lines == ["enginedead: 1 engine started, 1 false death, 0 genuine deaths"]
    assert none.lines == []  # no engines ran: no summary
    label = engine.spec.label().split()
    assert full.lines[2].split() == [
        "64", "engine", "2s", "2", "0.713s", "0.715s", "13.0s", "1", "0",
        *label[:-1], label[-1] + ";", "faults:", "busy", "0.05", "s/seq",
    ]
    assert full.lines[3] == (
        "engines started: 1; restarts after a death: 0; false deaths: 1; genuine deaths: 0; policy: reference"
    )
    assert full.lines[4:7] == [  # where the time went, one line per kind
        f"time: engine starts 1 in 13.0s ({engine.spec.label()}: 1 in 13.0s)",
        "time: steps 2 in 1.4s",
        "time: tests with an engine 0.0s (their starts and steps included), without 0.0s",
    ]
    assert full.lines[7] == "enginedead: no results from xdist worker gw1 (it crashed)"
