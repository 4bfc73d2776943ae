"""``enginedead merge``: shard reports into one verdict table, machines kept apart, bad input one line.

The reports are fabricated in the shape ``report.build`` writes (schema v1, validated
against the published schema), with two fabricated machine fingerprints.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_enginedead import command
from pytest_enginedead.logic.machine import this_machine
from pytest_enginedead.logic.reporting import merging
from tests.support.downstream import enginedead, validated
from tests.support.records import deaths_written

Capture = pytest.CaptureFixture[str]

AVX2 = dict(this_machine(cpuinfo="model name\t: AMD EPYC\nflags\t\t: fpu avx2\n", env={}))
AVX512 = dict(this_machine(cpuinfo="model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f\n", env={}))


def row(nodeid: str, batch: int, p50: float, verdict: str | None = None, source: str = "policy reference",
        outcome: str = "passed") -> dict[str, Any]:
    return {
        "nodeid": nodeid, "when": "call", "outcome": outcome, "batch_size": batch, "timeout_s": 2.0,
        "deadline_s": 2.0, "deadline_source": source, "engine": f"engine, bs{batch}, model tiny-llama",
        "steps": 12, "step_p50_s": p50, "step_max_s": p50 * 2, "step_max_running": False,
        "verdict": verdict, "deaths": deaths_written(verdict), "guard_events": [],
        "promised": source.startswith("policy"),
    }


ROWS = [
    row("t.py::test_stock[bs64]", 64, 0.2, "SLOW", "the enginedead_timeout marker", "failed"),
    row("t.py::test_policy[bs64]", 64, 0.2),
    row("t.py::test_small[bs2]", 2, 0.05),
    row("t.py::test_crash[bs4]", 4, 0.06, "DEAD"),
]
COLLECTED = ["t.py::test_plain", *(r["nodeid"] for r in ROWS)]


def report(rows: list[dict[str, Any]], machine: dict[str, Any], vllm: str = "0.32.0",
           shard: tuple[int, int, list[str]] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema_version": 1, "created": "2026-12-02T04:00:00+0000",
        "vllm": {"version": vllm, "deadline_env": "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"},
        "machine": machine, "policy": {"name": "reference", "source": "default"}, "batch_sizes": [8, 64],
        "engines_started": 1, "restarts": 0, "configurations": 1, "engines": [], "tests": rows,
        "lost_workers": [],
    }
    if shard is not None:
        k, n, tests = shard
        data["shard"] = {"index": k, "count": n, "collected": len(COLLECTED), "tests": tests,
                         "engine_configurations": 1, "balanced_by": "tests and engine starts"}
    return validated(data)


def write(tmp_path: Path, name: str, data: dict[str, Any] | str) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def shards(tmp_path: Path, machine2: dict[str, Any] = AVX2) -> list[str]:
    first = write(tmp_path, "s1.json", report(ROWS[:2], AVX2, shard=(1, 2, COLLECTED[:3])))
    second = write(tmp_path, "s2.json", report(ROWS[2:], machine2, shard=(2, 2, COLLECTED[3:])))
    return [first, second]


def run(capsys: Capture, *args: str) -> tuple[int, str, str]:
    code = command.main(["merge", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_two_shards_give_the_table_of_the_unsharded_run(tmp_path: Path, capsys: Capture) -> None:
    whole = write(tmp_path, "whole.json", report(ROWS, AVX2))
    code_whole, out_whole, _ = run(capsys, whole)
    code, out, err = run(capsys, *shards(tmp_path))
    assert code == code_whole == 0, out + err
    table = [ln for ln in out.splitlines() if ln.startswith("0.32.0")]
    assert table == [ln for ln in out_whole.splitlines() if ln.startswith("0.32.0")]
    assert len(table) == 4 and any("SLOW" in ln and "test_stock[bs64]" in ln for ln in table)
    assert "enginedead merge: 2 reports, 4 engine tests, 1 machine: no false death under the policy" in out
    assert "  M1: AMD EPYC, 2 cores, avx2, torch" in out.replace(f"{AVX2['cores_used']} cores", "2 cores")


def test_a_missing_or_doubled_shard_fails_the_merge(tmp_path: Path, capsys: Capture) -> None:
    first, second = shards(tmp_path)
    code, out, _ = run(capsys, first)
    assert code == 1 and "vLLM 0.32.0, 2 shards of 5 tests: shard 2/2 missing" in out
    code, out, _ = run(capsys, first, first, second)
    assert code == 1 and "shard 1/2 given twice" in out


def test_a_test_in_two_shards_fails_the_merge(tmp_path: Path, capsys: Capture) -> None:
    first = write(tmp_path, "a.json", report(ROWS[:2], AVX2, shard=(1, 2, COLLECTED[:3])))
    second = write(tmp_path, "b.json", report(ROWS[2:], AVX2, shard=(2, 2, COLLECTED[2:])))
    code, out, _ = run(capsys, first, second)
    assert code == 1 and f"{COLLECTED[2]} ran in {first} and in {second}" in out


def test_a_false_death_under_the_policy_fails_the_merge(tmp_path: Path, capsys: Capture) -> None:
    """Under the stock deadline (a marker) a false death is the bug shown; under the policy, a failure."""
    died = row("t.py::test_policy[bs64]", 64, 0.2, "SLOW", outcome="failed")
    bad = write(tmp_path, "bad.json", report([died], AVX2))
    code, out, _ = run(capsys, bad)
    assert code == 1
    assert ("false death under the policy: t.py::test_policy[bs64] (batch 64, deadline 2.0 s from "
            "policy reference)") in out


def test_step_figures_of_two_machines_stay_apart(tmp_path: Path, capsys: Capture) -> None:
    code, out, err = run(capsys, *shards(tmp_path, machine2=AVX512))
    assert code == 0, out + err
    assert "M1:" in out and "M2:" in out and "avx2/avx512f" in out
    figures = [ln for ln in out.splitlines() if ln.startswith("steps on ")]
    assert [ln.split(":")[0] for ln in figures] == ["steps on M1, vLLM 0.32.0", "steps on M2, vLLM 0.32.0"]
    assert "median of their p50s 0.200s" in figures[0] and "median of their p50s 0.055s" in figures[1]
    code, out, _ = run(capsys, "--json", *shards(tmp_path, machine2=AVX512))
    data = json.loads(out)
    assert [t["machine"] for t in data["tests"]] == [1, 1, 2, 2] and len(data["machines"]) == 2
    assert data["ok"] is True and data["false_deaths"] == 0


def test_calibrations_from_different_machines_are_refused(tmp_path: Path, capsys: Capture) -> None:
    cal = {"fit": {"a_s": 0.1}, "results": [], "machine": AVX2}
    a = write(tmp_path, "a.json", cal)
    b = write(tmp_path, "b.json", {**cal, "machine": AVX512})
    code, out, err = run(capsys, a, b)
    assert code == 2 and out == ""
    assert err.startswith("enginedead merge: error: ") and len(err.splitlines()) == 1
    assert "are calibrations from different machines (they differ in isa_flags)" in err
    code, out, _ = run(capsys, a, write(tmp_path, "c.json", cal))
    assert code == 0 and "calibrations: 2, all on M1" in out


def test_junitxml_holds_one_case_per_engine_test(tmp_path: Path, capsys: Capture) -> None:
    bad = write(tmp_path, "bad.json", report([*ROWS, row("t.py::test_p[bs8]", 8, 0.1, "SLOW")], AVX2))
    code, _, _ = run(capsys, "--junitxml", str(tmp_path / "m.xml"), bad)
    assert code == 1
    suite = ET.parse(tmp_path / "m.xml").getroot()
    assert suite.get("tests") == "5" and suite.get("failures") == "1"
    failed = [c.get("name") for c in suite if c.find("failure") is not None]
    assert failed == ["t.py::test_p[bs8]"]


@pytest.mark.processes
@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "is not an enginedead report: not JSON, or cut short"),
    ('{"schema_version": 1, "tests": [', "is not an enginedead report: not JSON, or cut short"),
    ("[1, 2]", "is not an enginedead report: it holds a JSON list"),
    ('{"tests": []}', "is not an enginedead report (no 'schema_version')"),
    ('{"schema_version": 2, "tests": [], "engines": [], "machine": {}}', "report schema_version 2"),
    ('{"schema_version": 1, "engines": [], "machine": {}}',
     "is not a whole enginedead report: 'tests' is missing"),
], ids=["not-json", "truncated", "a-list", "no-schema", "schema-2", "no-tests"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path: Path, content: str, why: str) -> None:
    good = write(tmp_path, "good.json", report(ROWS, AVX2))
    bad = write(tmp_path, "bad.json", content)
    done = enginedead("merge", "-v", "--junitxml", str(tmp_path / "m.xml"), good, bad)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"enginedead merge: error: {bad}") and why in done.stderr
    assert not (tmp_path / "m.xml").exists()


def test_a_missing_report_or_junit_over_a_report_is_refused(tmp_path: Path, capsys: Capture) -> None:
    good = write(tmp_path, "good.json", report(ROWS, AVX2))
    code, _, err = run(capsys, good, str(tmp_path / "nope.json"))
    assert code == 2 and f"{tmp_path / 'nope.json'} does not exist" in err
    before = Path(good).read_text()
    code, _, err = run(capsys, "--junitxml", good, good)
    assert code == 2 and "names one of the reports to merge; give another path" in err
    assert Path(good).read_text() == before
    assert merging.parse(before, good).kind == "report"
