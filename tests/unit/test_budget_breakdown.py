"""``bench/budget.py``'s breakdown of a run: each start's ending, the imports estimated and spawned,
the wall measured and projected, and the text that says them (a run written by hand, nothing started)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import budget

IMPORTS = {"llm": 5.0, "engine_core": 3.0, "worker": 2.0, "api_server": 4.0}
LEDGER: list[dict[str, Any]] = [
    {"event": "start", "kind": "offline", "label": "tp2, b8", "start_s": 30.5, "pid": 11,
     "tag": "tests/engine/test_a.py::t1@g1", "import_s": 4.0},
    {"event": "start", "kind": "server", "label": "b4", "start_s": 20.0, "pid": 11,
     "tag": "tests/engine/test_b.py::t2", "restart": True},
    {"event": "stop", "pid": 11, "label": "tp2, b8", "died": True},
    {"event": "start", "kind": "offline", "label": "b4", "start_s": 12.0, "pid": 12,
     "test": "tests/engine/test_c.py::t3"},
    {"event": "stop", "pid": 12, "label": "b4", "cut": True},
    {"event": "start", "kind": "offline", "label": "pp2", "start_s": 9.0, "pid": 12,
     "tag": "tests/engine/test_c.py::t3", "import_s": 0.2},
    {"event": "stop", "pid": 12, "label": "pp2"},
]


def phase(nodeid: str, worker: str, start: float, stop: float, when: str = "call",
          outcome: str = "passed") -> dict[str, Any]:
    return {"event": "phase", "nodeid": nodeid, "worker": worker, "duration": stop - start, "start": start,
            "stop": stop, "when": when, "outcome": outcome}


TIMELINE = [
    {"event": "start", "t": 100.0},
    phase("tests/engine/test_a.py::t1@g1", "gw0", 101.0, 151.0, when="setup"),
    phase("tests/engine/test_a.py::t1@g1", "gw0", 151.0, 156.0, outcome="failed"),
    phase("tests/engine/test_b.py::t2", "gw1", 101.0, 131.0),
    phase("tests/engine/test_c.py::t3", "gw1", 148.0, 170.0),
    {"event": "finish", "t": 175.0},
]


def run_dir(tmp_path: Path, ledger: list[dict[str, Any]], timeline: list[dict[str, Any]]) -> Path:
    for name, rows in (("ledger.jsonl", ledger), ("timeline.jsonl", timeline)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_the_totals_count_the_starts_their_imports_and_the_wall(tmp_path: Path) -> None:
    data = budget.breakdown(run_dir(tmp_path, LEDGER, TIMELINE), IMPORTS)
    assert data["totals"] == {
        "tests": 3, "starts": 4, "first_starts": 3, "restarts": 1,
        "ended": {"stopped": 1, "death": 1, "cut": 1, "killed": 1, "?": 0}, "repeated_configurations": 1,
        "start_s": 71.5, "start_median_s": 16.0, "start_longest_s": 30.5, "import_in_test_process_s": 4.2,
        # one ``from vllm import LLM`` for pid 12's first offline start, which recorded none
        "import_in_test_process_estimated_s": 5.0,
        # engine core + a worker per rank (tp2, pp2: two), + the API server for the server
        "import_in_spawned_processes_s": 7.0 + 9.0 + 5.0 + 7.0,
        "tests_s": 107.0, "wall_measured_s": 75.0, "wall_projected_s": 55.0,
        "idle_at_end_measured_s": 14.0, "idle_at_end_projected_s": 3.0,
    }
    assert [t["test"] for t in data["tests"]] == [
        "tests/engine/test_a.py::t1@g1", "tests/engine/test_b.py::t2", "tests/engine/test_c.py::t3"]


def test_without_imports_or_a_clock_those_figures_are_unknown(tmp_path: Path) -> None:
    data = budget.breakdown(run_dir(tmp_path, LEDGER, TIMELINE[1:-1]))
    tot = data["totals"]
    assert tot["import_in_test_process_estimated_s"] is None and tot["import_in_spawned_processes_s"] is None
    assert tot["wall_measured_s"] is None and tot["idle_at_end_measured_s"] == 14.0
    empty = budget.breakdown(run_dir(tmp_path, [], []))["totals"]
    assert empty["starts"] == 0 and empty["idle_at_end_measured_s"] is None


def test_the_text_names_each_start_and_where_the_seconds_went(tmp_path: Path) -> None:
    lines = budget.render(budget.breakdown(run_dir(tmp_path, LEDGER, TIMELINE), IMPORTS))
    assert lines[1] == "   55.0  gw0          1     30.5  engine/test_a.py::t1@g1  (failed)"
    assert lines[2].strip() == "30.5 s  offline tp2, b8: configuration, ended: death, import 4.0 s"
    assert lines[6].strip() == ("12.0 s  offline b4: configuration, ended: cut, "
                                "configuration started by another run too")
    assert ("vLLM import in the test's own process: 9 s (5 s of it estimated: a ledger without import_s); "
            "in the processes the starts spawned (engine core, workers, API servers): ~28 s; "
            "the engines' own start: the rest, ~34 s") in lines
    assert ("  each import alone in a fresh interpreter (median): llm 5.0 s, engine_core 3.0 s, "
            "worker 2.0 s, api_server 4.0 s") in lines
    wall = next(line for line in lines if line.startswith("tests: 3, "))
    assert wall.startswith("tests: 3, 107 s of test time (÷ 2 = 0 min 53.5 s); wall measured 1 min 15.0 s")
    assert wall.endswith("(idle at the end: measured 14 s, projected 3 s)")
