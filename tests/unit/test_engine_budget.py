"""The engine suite's budget (``tests/engine_budget.py``): every engine test named with the
configurations it starts, within ``MAX_STARTS``; a run's ledger held to it.  Both sides: what the
list allows passes, an unnamed test, an unnamed configuration, a start too many, fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import engine_budget
from tests.engine_budget import BUDGET, MAX_STARTS, Entry, engine_tests, ledger_problems, listing_problems

ROOT = Path(__file__).resolve().parents[2]


def collected_engine_tests() -> list[str]:
    """pytest's own node ids of the engine suite (collection only: nothing starts)."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "engine", "tests/engine"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [ln for ln in done.stdout.splitlines() if ln.startswith("tests/engine/")]


@pytest.mark.processes
def test_every_engine_test_is_named_and_the_starts_fit() -> None:
    """What the lint stage checks (by reading the files), against pytest's collection."""
    collected = collected_engine_tests()
    assert listing_problems(collected) == []
    assert sum(e.starts for e in BUDGET) <= MAX_STARTS
    # the lint stage's reading of the files finds the tests pytest collects
    assert {t.split("[")[0].removeprefix("tests/engine/") for t in collected} == set(engine_tests())


def test_the_lint_stage_check_passes_and_fails(tmp_path: Path) -> None:
    assert engine_budget.main() == 0
    (tmp_path / "test_new.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.engine\n\n\ndef test_a_new_engine_test():\n    pass\n")
    # not marked engine: none of the budget's business (tests/engine/test_compat_vllm.py starts nothing)
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    (tmp_path / "test_one.py").write_text(
        "import pytest\n\n\n@pytest.mark.engine\ndef test_marked():\n    pass\n\n\n"
        "def test_not():\n    pass\n")
    assert engine_tests(tmp_path) == ["test_new.py::test_a_new_engine_test", "test_one.py::test_marked"]
    (tmp_path / "test_one.py").unlink()
    (problem,) = listing_problems(engine_tests(tmp_path), budget=())
    assert problem.startswith("test_new.py::test_a_new_engine_test is an engine test that "
                              "tests/engine_budget.py does not name")
    listed = (Entry(("test_new.py::test_a_new_engine_test",), ("bs8, model tiny-llama",), 3, "x"),)
    assert listing_problems(engine_tests(tmp_path), budget=listed, max_starts=3) == []
    assert listing_problems(engine_tests(tmp_path), budget=listed, max_starts=2) == [
        "the entries add up to 3 engine starts, more than MAX_STARTS 2: give starts back elsewhere, or raise "
        "MAX_STARTS and say why"]
    gone = (*listed, Entry(("test_gone.py::test_x",), (), 0, "x"))
    assert listing_problems(engine_tests(tmp_path), budget=gone, max_starts=3) == [
        "tests/engine_budget.py names test_gone.py::test_x, which is no test in tests/engine/"]


def start(tag: str, label: str, restart: bool = False) -> dict[str, object]:
    return {"kind": "engine", "label": label, "start_s": 20.0, "restart": restart, "pid": 1, "tag": tag}


def test_a_runs_ledger_is_held_to_the_list() -> None:
    tiny = "bs64, model tiny-llama"
    budget = (Entry(("test_a.py::test_one", "test_a.py::test_two"), (tiny, "bs* gemma"), 2, "why"),)
    ok = [start("tests/engine/test_a.py::test_one[bs8]@grp", tiny),
          start("tests/engine/test_a.py::test_two", "bs12 gemma", restart=True),
          {"event": "stop", "label": tiny, "pid": 1, "tag": "tests/engine/test_a.py::test_one"},
          start("tests/unit/test_x.py::test_y", "anything")]  # not the engine suite's
    assert ledger_problems(ok, budget) == []
    assert ledger_problems([*ok, start("tests/engine/test_a.py::test_two", tiny)], budget) == [
        "test_a.py::test_one, test_a.py::test_two started 3 engines, 2 in tests/engine_budget.py (why)"]
    served = "server, bs64, model tiny-llama"
    assert ledger_problems([start("tests/engine/test_a.py::test_one", served)], budget) == [
        f"tests/engine/test_a.py::test_one started {served!r}, a configuration its entry "
        "in tests/engine_budget.py does not name (bs64, model tiny-llama, bs* gemma)"]
    assert ledger_problems([start("tests/engine/test_b.py::test_new", "bs8, model tiny-llama")], budget) == [
        "tests/engine/test_b.py::test_new started 'bs8, model tiny-llama', and tests/engine_budget.py names "
        "no such test"]
