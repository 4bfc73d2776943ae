"""A run's life: its inputs checked and outputs claimed before the first engine, the report
written at the end (through a FIFO, a symlink, a directory gone meanwhile)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_enginedead.compat import versions
from tests.support import examples
from tests.support.doors import (
    ENGINE,
    assert_clean,
    assert_untouched,
    config,
    leftovers,
    make_nodes,
    marked,
    model,
    returning,
)
from tests.support.downstream import Downstream

# --- before the first engine: a run with vLLM present, watched by the tripwire -------------------

needs_vllm = pytest.mark.skipif(versions.installed_version() is None, reason="needs vLLM installed")


@needs_vllm
@pytest.mark.parametrize(
    ("args", "files", "code", "needle"),
    [
        (("--enginedead-report=afile/r.json",), {"afile": "x"}, 4, "is not a directory"),
        (("--enginedead-model=m",), model(config(vocab_size=-1)), 4, '"vocab_size": -1 must be at least 1'),
        (("--enginedead-policy=pre_nan:p",), returning("pre_nan", "float('nan')"), 1, "returned nan"),
        ((), {"test_engine.py": marked("enginedead_timeout(0.5)", "vllm_engine")}, 1,
         "seconds=0.5 is not a whole number of seconds"),
    ],
    ids=["report-path", "model-config", "policy-value", "marker"],
)
def test_checked_before_the_first_engine_starts(
    downstream: Downstream, wired: Path, args: tuple[str, ...], files: dict[str, str], code: int, needle: str
) -> None:
    """With vLLM installed and engine tests planned, each bad input ends the run (or its tests)
    before any engine starts: the import tripwire stays untouched (it does trip on a good one)."""
    (downstream.path / "test_engine.py").write_text(ENGINE)
    for name, content in files.items():
        (downstream.path / name).parent.mkdir(parents=True, exist_ok=True)
        (downstream.path / name).write_text(content)
    result = downstream.run(*args, in_subprocess=True, timeout=120)
    assert result.ret == code, result.text[-3000:]
    assert needle in result.text
    assert_clean(result.text)
    assert "engine failed to start" not in result.text and "tripwire" not in result.text


# --- the report, written at the end -------------------------------------------------------------


def test_a_fifo_with_a_reader_gets_the_report(downstream: Downstream, private_tmp: Path) -> None:
    """A FIFO somebody reads is written through, in place: the reader gets the whole report, and
    the FIFO is still a FIFO."""
    downstream.copy(examples.PLAIN)
    nodes = make_nodes(downstream.path, {"fifo": "fifo"})
    reader = os.open(downstream.path / "fifo", os.O_RDONLY | os.O_NONBLOCK)  # a reader, before the run
    try:
        result = downstream.run(f"--enginedead-report={downstream.path / 'fifo'}")
        assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
        data = b""
        while chunk := os.read(reader, 65536):
            data += chunk
    finally:
        os.close(reader)
    report = json.loads(data)
    assert report["schema_version"] == 1 and report["tests"] == []
    assert_untouched(nodes)
    assert leftovers(private_tmp) == []


def test_a_report_path_that_stops_taking_output_is_one_line_at_the_end(downstream: Downstream) -> None:
    """Proven at the start, the report's directory is replaced by a file during the run: the end
    says so in one line and the exit status is not 0 (it was a traceback), the tests' outcome
    stays in the summary."""
    downstream.pytester.makepyfile(test_spoil="""
        import os, shutil

        def test_spoils_the_report_directory():
            shutil.rmtree("out", ignore_errors=True)
            with open("out", "w") as f:
                f.write("not a directory")
    """)
    (downstream.path / "out").mkdir()
    result = downstream.run(f"--enginedead-report={downstream.path / 'out' / 'r.json'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.text[-3000:]
    assert_clean(result.text)
    lines = [ln for ln in result.stderr.lines if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: enginedead: the report was not written: "), lines
    assert "out/r.json' (from command line): cannot be written" in lines[0]
    result.assert_outcomes(passed=1)


def test_a_process_that_outlives_sigkill_is_one_line_and_a_failed_run(downstream: Downstream) -> None:
    """An engine whose stop leaves a process the kernel would not take (here one its stop names as
    held in uninterruptible sleep): the summary names it in one line, the run's exit status says it
    failed, and no traceback comes out of pytest's session end (it was a RuntimeError from
    pytest_sessionfinish, and an INTERNALERROR)."""
    downstream.pytester.makeconftest("""
        import pytest
        from pytest_enginedead.face.run import run_of
        from pytest_enginedead.harness.base import EngineBase
        from pytest_enginedead.harness.cleanup import ProcessesSurvived, Survivor
        from pytest_enginedead.logic.planning.engines import EngineSpec, Instructions

        class Held(EngineBase):
            def start(self, first, progress=None):
                self.instruct(first)
                return self

            def stop(self):
                super().stop()
                raise ProcessesSurvived([Survivor(4242, "VLLM::Worker_TP1", "disk-sleep")])

        @pytest.fixture
        def held(request, monkeypatch):
            import pytest_enginedead.harness.pool as pool_module
            monkeypatch.setattr(pool_module, "Engine", Held)
            return run_of(request.config).pool.acquire(EngineSpec("/m", 8), Instructions(2.0, "test"))
    """)
    downstream.pytester.makepyfile(test_held="""
        def test_uses_an_engine(held):
            assert held.instructions
    """)
    result = downstream.run()
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text[-3000:]
    assert "Traceback" not in result.text and "INTERNALERROR" not in result.text, result.text[-3000:]
    (line,) = [ln for ln in result.stdout.lines if "outlived SIGKILL" in ln]
    assert line.startswith("enginedead: ERROR: a process of engine bs8, model m outlived SIGKILL by 30 s: "
                           "pid 4242 (VLLM::Worker_TP1: in uninterruptible sleep (D state)"), line


def test_a_report_through_a_symlink_replaces_the_file_not_the_link(downstream: Downstream) -> None:
    """``latest.json -> runs/1.json``: the file the link names gets the report; the link stays."""
    downstream.copy(examples.PLAIN)
    (downstream.path / "runs").mkdir()
    (downstream.path / "runs" / "1.json").write_text("old")
    (downstream.path / "latest.json").symlink_to("runs/1.json")
    result = downstream.run(f"--enginedead-report={downstream.path / 'latest.json'}")
    assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
    assert (downstream.path / "latest.json").is_symlink()
    assert json.loads((downstream.path / "runs" / "1.json").read_text())["schema_version"] == 1
    assert sorted(os.listdir(downstream.path / "runs")) == ["1.json"]  # no temporary sibling left


# --- ranks: each gets a core of those the run's engines may use ----------------------------------


def test_more_ranks_than_cores_is_refused_in_one_line(
    downstream: Downstream, wired: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--enginedead-tensor-parallel-size`` one above this machine's cores: exit 4 before any engine,
    naming the option, the cores and what would do; under xdist the bound is a worker's share."""
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)  # the user's binding would win
    cores = len(os.sched_getaffinity(0))
    (downstream.path / "test_engine.py").write_text(ENGINE)
    flag = f"--enginedead-tensor-parallel-size={cores + 1}"
    too_many = downstream.run(flag, in_subprocess=True, timeout=120)
    assert too_many.ret == 4, too_many.text[-3000:]
    line = f"--enginedead-tensor-parallel-size='{cores + 1}' (from command line): {cores + 1} ranks need"
    assert line in too_many.text and f"this run owns {cores}" in too_many.text
    assert_clean(too_many.text)
    assert "tripwire" not in too_many.text
    if cores >= 2:  # each of two xdist workers owns half the cores: as many ranks as cores do not fit
        shared = downstream.run(f"--enginedead-tensor-parallel-size={cores}", "-n", "2", "-p", "xdist",
                                in_subprocess=True, timeout=120)
        assert shared.ret == 4, shared.text[-3000:]
        assert f"each of the 2 xdist workers owns {cores // 2}" in shared.text


# --- progress while an engine starts, in pytest's row of results --------------------------------

STARTS_AN_ENGINE = '''
import time

import pytest

from pytest_enginedead.face.run import run_key


@pytest.fixture
def starting(request):
    """What the pool says while an engine starts in this test's setup (no vLLM here)."""
    progress = request.config.stash[run_key].progress
    progress("starting engine (bs8, model tiny-llama)")
    time.sleep(0.1)
    progress("engine ready in 0.1 s (bs8, model tiny-llama)", done=True)


def test_first(enginedead_policy):
    pass


def test_second(starting, enginedead_policy):
    pass


def test_third(enginedead_policy):
    pass
'''


@pytest.mark.parametrize("verbose", [False, True], ids=["dots", "verbose"])
def test_engine_start_progress_keeps_pytests_row_whole(tmp_path: Path, verbose: bool) -> None:
    """Progress lines come on lines of their own, and pytest starts its row again after them (the
    file's path, its results, its [100%]), as after any plugin's line: the row is never broken
    mid-way with results on a line without their path."""
    import subprocess
    import sys

    (tmp_path / "test_progress.py").write_text(STARTS_AN_ENGINE)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "test_progress.py"]
    done = subprocess.run(cmd + (["-v"] if verbose else []), cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, check=False,
                          env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    start = lines.index("enginedead: starting engine (bs8, model tiny-llama)")
    assert lines[start + 1] == "enginedead: engine ready in 0.1 s (bs8, model tiny-llama)"
    after = lines[start + 2]
    if verbose:
        assert after.startswith("test_progress.py::test_second PASSED") and after.endswith("]"), lines
    else:
        assert lines[start - 1].startswith("test_progress.py .")  # the row so far, ended, then ours
        assert after.startswith("test_progress.py ..") and after.endswith("[100%]"), lines
