"""The report's rows, built from a real ``Engine`` that was never started: no vLLM.

The engine's run directory gets a step record written in the worker's format, so the
rows are computed exactly as after a real run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_enginedead.contract.control import Injection
from pytest_enginedead.face import summary
from pytest_enginedead.face.handles import Handle
from pytest_enginedead.face.options import Settings
from pytest_enginedead.harness.liveness import LivenessSettings
from pytest_enginedead.harness.offline import Engine
from pytest_enginedead.harness.pool import EngineRecord
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.machine import this_machine
from pytest_enginedead.logic.planning.engines import EngineSpec, GuardSpec, Instructions
from pytest_enginedead.logic.reporting.report import (
    Results,
    build,
    death_counts,
    engine_row,
    junit_properties,
    time_breakdown,
    time_lines,
    verdict_word,
)
from pytest_enginedead.logic.timeouts.policies import TimeoutPolicy
from tests.support.downstream import validated
from tests.support.records import write_steps


def test_verdict_words() -> None:
    assert [verdict_word(v) for v in (None, "SLOW", "HUNG", "DEAD")] == [
        "ok", "false death", "genuine death", "genuine death",
    ]


def test_death_counts() -> None:
    deaths = [{"verdict": "SLOW"}, {"verdict": "HUNG"}, {"verdict": "SLOW"}, {"verdict": "DEAD"}]
    assert death_counts(deaths) == (2, 2)
    assert death_counts([]) == (0, 0)
    with pytest.raises(ValueError, match="not a verdict"):  # a record is read, never guessed
        death_counts([{"verdict": "slow"}])


def test_engine_row(engine: Engine) -> None:
    engine.instruct(Instructions(680.0, "policy reference"))
    engine.instruct(Instructions(1.5, "the enginedead_timeout marker", Injection(slow_s_per_seq=0.05)))
    engine.instruct(Instructions(1.5, "the enginedead_timeout marker", Injection(slow_s_per_seq=0.05)))
    engine.start_s = 12.345
    engine.deaths += [{"verdict": "SLOW"}, {"verdict": "DEAD"}, {"verdict": "SLOW"}]
    write_steps(engine, (1, 8, 10.0, 0.5), (2, 64, 11.0, 1.0), (3, 64, 12.0, 0.25), (4, 64, 13.0, None))
    row = engine_row(engine, ["t.py::a", "t.py::b"], restart=True)
    assert row == {
        "label": "bs64, model tiny-llama",
        "kind": "engine",
        "batch_size": 64,
        "deadline_s": 2.0,  # the last test's, as vLLM reads it (1.5 -> 2 whole seconds)
        "deadlines": [680.0, 2.0, 2.0],
        "deadline_source": "policy reference; the enginedead_timeout marker",
        "injection": "none; busy 0.05 s/seq",
        "guard": None,
        "model": BUNDLED_MODEL,
        "start_s": 12.35,
        "restart": True,
        "steps": 3,
        "step_p50_s": 0.5,
        "step_max_s": 1.0,
        "step_total_s": 1.75,
        "headroom": 2.0,
        "false_deaths": 2,
        "genuine_deaths": 1,
        "guard_events": [],
        "tests": ["t.py::a", "t.py::b"],
        "pids": [{"pid": 4242, "create_time": 0.0}],
        "shm": ["/dev/shm/psm_a", "/dev/shm/psm_b"],
        "survived_kill": [],
    }


def test_engine_row_outlives_the_run_directory(engine: Engine) -> None:
    """After stop the run directory is gone; the row still has the steps it recorded."""
    engine.instruct(Instructions(3.0))
    write_steps(engine, (1, 8, 1.0, 0.75))
    engine.stop()
    assert not os.path.exists(engine.run_dir)
    row = engine_row(engine, [])
    assert (row["steps"], row["step_max_s"], row["headroom"]) == (1, 0.75, 4.0)


def test_engine_row_of_a_guarded_engine_without_steps() -> None:
    guarded = Engine(EngineSpec(BUNDLED_MODEL, 8, guard=GuardSpec(30.0)))
    try:
        guarded.instruct(Instructions(2.0))
        row = engine_row(guarded, [])
    finally:
        guarded.stop()
    assert row["guard"] == "guard (policy reference, hang_s 30 s)"
    assert (row["steps"], row["step_p50_s"], row["step_max_s"], row["headroom"]) == (0, None, None, None)
    assert row["start_s"] is None and row["restart"] is False


def test_junit_properties() -> None:
    row: Any = {
        "batch_size": 64, "deadline_s": 2.0, "step_p50_s": 0.71, "step_max_s": 2.04, "verdict": "SLOW",
    }
    assert junit_properties(row) == [
        ("enginedead_batch_size", 64),
        ("enginedead_deadline_s", 2.0),
        ("enginedead_step_p50_s", 0.71),
        ("enginedead_step_max_s", 2.04),
        ("enginedead_verdict", "false death"),
    ]
    row["verdict"] = None
    assert junit_properties(row)[-1] == ("enginedead_verdict", "ok")


# --- Results: observe, add_engines, the wire ----------------------------------------------


def phase_report(when: str, outcome: str = "passed") -> pytest.TestReport:
    return pytest.TestReport("t.py::test_x[bs8]", ("t.py", 1, "test_x"), {}, outcome, None, when)


def test_observe_keeps_the_call_and_what_did_not_pass(engine: Engine) -> None:
    write_steps(engine, (1, 64, time.monotonic() - 100, 9.0))  # an earlier test's step
    ins = Instructions(1.5, "the enginedead_timeout marker", Injection(slow_s_per_seq=0.05))
    engine.instruct(ins)
    handle = Handle(engine, 8, ins, "reference", 680.0, LivenessSettings())
    now = time.monotonic()
    write_steps(engine, (2, 8, now, 0.05), (3, 8, now, None))  # this test's: one still running
    time.sleep(0.1)  # the running step is now the longest
    handle.note_death({"verdict": "HUNG"})
    handle.note_death({"verdict": "SLOW"})
    results = Results()
    assert results.observe("t.py::test_x[bs8]", phase_report("setup"), handle) is None
    row = results.observe("t.py::test_x[bs8]", phase_report("call", "failed"), handle)
    assert row is not None and results.tests == [row]
    assert row["nodeid"] == "t.py::test_x[bs8]" and (row["when"], row["outcome"]) == ("call", "failed")
    assert row["batch_size"] == 8 and row["timeout_s"] == row["deadline_s"] == 2.0
    assert row["deadline_source"] == "the enginedead_timeout marker"
    assert row["engine"] == "bs64, model tiny-llama; deadline 2 s, busy 0.05 s/seq"
    assert row["steps"] == 1 and row["step_p50_s"] == 0.05  # not the earlier test's 9 s step
    assert row["step_max_running"] and row["step_max_s"] is not None and 0.1 <= row["step_max_s"] < 9.0
    assert row["verdict"] == "SLOW" and [d["verdict"] for d in row["deaths"]] == ["HUNG", "SLOW"]
    assert engine.deaths == row["deaths"]  # the engine keeps them too, for its own row
    teardown = results.observe("t.py::test_x[bs8]", phase_report("teardown", "failed"), handle)
    assert teardown is not None and len(results.tests) == 2
    assert results.observe("t.py::test_x[bs8]", phase_report("teardown", "passed"), handle) is None


def test_wire_carries_rows_to_the_controller(engine: Engine) -> None:
    engine.instruct(Instructions(2.0))
    worker = Results(configurations=2)
    worker.add_engines([EngineRecord(engine.spec, engine, ["t.py::a"]), EngineRecord(engine.spec, engine)])
    worker.tests.append({"nodeid": "t.py::a"})  # type: ignore[typeddict-item]
    controller = Results(configurations=1)
    controller.absorb(worker.to_wire(), "gw1")
    controller.absorb(Results(configurations=3).to_wire(), "gw0")
    controller.absorb(None, "gw2")  # a worker that crashed sends nothing
    assert controller.configurations == 3
    assert controller.tests == [{"nodeid": "t.py::a"}]
    assert [e["worker"] for e in controller.engines] == ["gw1", "gw1"]
    assert [e["tests"] for e in controller.engines] == [["t.py::a"], []]
    assert {k: v for k, v in controller.engines[0].items() if k != "worker"} == json.loads(
        json.dumps(worker.engines[0])
    )
    assert controller.lost_workers == ["gw2"]


# --- the JSON report ------------------------------------------------------------------------


def settings(path: str | None = None) -> Settings:
    return Settings(
        batch_sizes=(8, 64), model=BUNDLED_MODEL, model_source="bundled", policy=TimeoutPolicy.reference(),
        policy_name="reference", policy_source="default", policy_spec="reference", report=path, guard=False,
        liveness=LivenessSettings(), vllm_version=None,
    )


def test_built_report_meets_its_schema(engine: Engine, tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    engine.instruct(Instructions(2.0, "the enginedead_timeout marker"))
    write_steps(engine, (1, 8, 1.0, 0.5))
    results = Results(configurations=1)
    results.add_engines([EngineRecord(engine.spec, engine, ["t.py::a"], restart=True)])
    ins = Instructions(2.0)
    handle = Handle(engine, 8, ins)
    results.observe("t.py::a", phase_report("call"), handle)
    data = build(results, settings(), this_machine())
    path = tmp_path / "sub" / "report.json"
    summary.write(str(path), data)
    assert os.listdir(path.parent) == ["report.json"]  # written whole, no temp file left
    written = json.loads(path.read_text())
    assert validated(written) == written
    assert (written["engines_started"], written["configurations"], written["restarts"]) == (1, 1, 1)
    assert written["schema_version"] == 1 and written["batch_sizes"] == [8, 64]
    broken = {**written, "engines": [{**written["engines"][0], "batch_size": 0}]}
    with pytest.raises(jsonschema.ValidationError):
        validated(broken)


def test_time_breakdown_per_configuration_and_over_the_wire() -> None:
    """Starts summed per configuration, steps and tests by kind; xdist workers' times add up."""
    rows: Any = [
        {"label": "bs64, model m", "start_s": 10.0, "steps": 5, "step_total_s": 2.5},
        {"label": "bs64, model m", "start_s": 12.0, "steps": 1, "step_total_s": 3.0, "restart": True},
        {"label": "bs8, model m", "start_s": None, "steps": 0, "step_total_s": 0.0},
    ]
    worker = Results(engines=rows)
    worker.observe_time(True, 30.0)
    worker.observe_time(False, 0.5)
    controller = Results()
    controller.absorb(worker.to_wire(), "gw0")
    controller.absorb(worker.to_wire(), "gw1")
    t = time_breakdown(controller)
    assert t == {
        "engine_starts": 6, "engine_start_s": 44.0,
        "per_configuration": [
            {"configuration": "bs64, model m", "starts": 4, "start_s": 44.0},
            {"configuration": "bs8, model m", "starts": 2, "start_s": 0.0},
        ],
        "steps": 12, "step_s": 11.0, "engine_tests_s": 60.0, "other_tests_s": 1.0,
    }
    assert time_lines(t)[0] == (
        "time: engine starts 6 in 44.0s (bs64, model m: 4 in 44.0s; bs8, model m: 2 in 0.0s)"
    )
