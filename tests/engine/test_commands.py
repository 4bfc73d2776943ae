"""The ``enginedead`` command on real engines: the regression check's exit rule, calibration."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from pytest_enginedead.logic.timeouts.policies import STOCK_DEADLINE_S
from tests.support.downstream import enginedead
from tests.support.machine import GEMMA_MEASURED_AT, Measures, death_sizes
from tests.support.sizing import GEMMA_MOE

pytestmark = pytest.mark.engine


#: what an operator who runs the guard in production has exported (one value the guard refuses)
PRODUCTION_GUARD = {"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "soon"}


def test_check_exit_code_follows_false_deaths_under_the_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stock deadline kills the large batch falsely; the reference policy survives it: exit 0
    (the policy decides, not the stock run's death).  The guard an operator exported for
    production does not reach the check's runs: the stock run shows the same false death (its
    engine core's own record says the guard is off), and the header says what the check cleared.
    (Exit 1 when the policy dies too, ``--policy vllm-stock``: the same table and verdict line
    from a real run's report, tests/unit/commands/test_recorded_runs.py — its two engines, the
    policy run's restart after the stock run's death, are not started again here.)"""
    for name, value in PRODUCTION_GUARD.items():
        monkeypatch.setenv(name, value)
    report = tmp_path / "report.json"
    done = enginedead(
        "check", "--batch-sizes", "4,16", "--max-tokens", "2", "--policy", "reference",
        "--report", str(report), timeout=600, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout[done.stdout.index("batch  run"):]
    lines = {
        tuple(ln.split()[:2]): ln for ln in table.splitlines()[1:] if ln.strip() and ln.split()[0].isdigit()
    }
    assert set(lines) == {("4", "stock"), ("4", "policy"), ("16", "stock"), ("16", "policy")}
    assert lines[("4", "stock")].endswith("ok")
    assert lines[("16", "stock")].endswith("false death")
    assert lines[("16", "policy")].endswith("ok")
    # the last line names both runs: the stock run's death is vLLM's, shown; the policy's decides
    assert done.stdout.splitlines()[-1] == (
        "stock vLLM (2 s deadline): FALSE DEATH at batch 16; policy reference: no false death")
    cleared = ("enginedead check: cleared ENGINEDEAD_GUARD='1', ENGINEDEAD_GUARD_HANG_S='soon' inherited "
               "from the environment: the stock and policy runs are unguarded")
    assert cleared in done.stderr, done.stderr
    # progress on stderr from the first second (the header), engine starts included; the table and
    # the verdict on stdout
    progress = done.stderr.splitlines()
    assert progress[0].startswith("enginedead check: vLLM "), progress
    assert any(ln.strip().startswith("starting engine (") for ln in progress), progress
    assert any(ln.strip().startswith("batch ") and "[" in ln for ln in progress), progress
    assert not [ln for ln in done.stdout.splitlines() if ln.startswith("enginedead check: vLLM")]
    data = json.loads(report.read_text())
    assert data["policy"]["name"] == "reference"
    # what a person reads: progress, the table, one verdict line; details in the log
    assert len(done.stdout.splitlines()) < 30, done.stdout
    for noise in ("Traceback", "ERROR", "FAILURES"):
        assert noise not in done.stdout + done.stderr, noise
    log = Path(done.stdout.split("log: ")[1].split()[0])
    text = log.read_text()
    assert "EngineDeadError" in text and "false engine death" in text
    log.unlink()
    # one engine, dies last: the stock deadline's batch 16
    assert data["engines_started"] == 1, data["engines"]


@pytest.mark.xdist_group("gemma")  # one worker measures Gemma-4 once for the three
def test_check_on_the_reports_model_family(tmp_path: Path, step_cost: Measures) -> None:
    """The shrunk Gemma-4 MoE, nothing injected, sized from its decode steps on this
    machine: under vLLM's deadline shortened to the whole second the largest living batch of
    8, 4, 2 or 1 lives in (with half to spare), the dying batch (2.5 deadlines) dies falsely,
    and lives under the policy and under the guard.  (The smallest deadline keeps the dying
    batch, and so the test, affordable on a slow box.)"""
    gemma = GEMMA_MOE
    # the check's prompts are 4 tokens: a living batch's first step carries 4 per sequence
    sizes = death_sizes(step_cost(gemma, GEMMA_MEASURED_AT), most=512, living=(8, 4, 2, 1), tokens_per_seq=4)
    if isinstance(sizes, str):
        pytest.skip(sizes)
    print(sizes.describe())
    dying, living = str(sizes.dying), str(sizes.living)
    done = enginedead("check", "--model", str(gemma), "--batch-sizes", f"{living},{dying}",
                      "--stock-deadline", str(sizes.deadline_s), "--guard", timeout=840, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {tuple(ln.split()[:2]): ln for ln in done.stdout.splitlines() if ln[:5].strip().isdigit()}
    assert rows[(dying, "stock")].endswith("false death")
    for run in ("policy", "guard"):
        assert rows[(dying, run)].endswith("ok") and rows[(living, run)].endswith("ok")
    assert rows[(living, "stock")].endswith("ok")


@pytest.mark.xdist_group("gemma")
def test_calibrate_on_the_reports_model_family(step_cost: Measures) -> None:
    """Calibrate on the shrunk Gemma-4 MoE measures steps that grow with the batch and
    recommends deadlines that let every batch live: relations, not one box's seconds.  It is
    the same ``enginedead calibrate`` run the Gemma tests size their deaths from (one engine)."""
    cal = step_cost.calibration(GEMMA_MOE, GEMMA_MEASURED_AT)
    results = cal["results"]
    assert [r["batch_size"] for r in results] == list(GEMMA_MEASURED_AT)
    p50 = [r["p50_s"] for r in results]
    # 8 x the sequences cost more. How much more is the machine's: 3 x on the slow 2-core box,
    # 1.6 x on a faster one whose fixed per-step cost (~0.15 s) dwarfs the sequences added
    assert p50[-1] > p50[0], p50
    assert all(r["steps"] >= 6 for r in results), results
    assert all(r["stock_fires"] == (r["max_s"] > STOCK_DEADLINE_S) for r in results)
    assert all(r["recommended_s"] >= 3 * r["p99_s"] for r in results)


def test_calibrate_tiny_model(tmp_path: Path) -> None:
    """Batch sizes 1, 8, 64 on one engine of the tiny model: monotone step times,
    recommendations that meet the reference constraints, and a real PNG.  The log is a
    character device (what /dev/null is): vLLM's output goes through it, and it is still the
    same device afterwards, never replaced by a file."""
    png = tmp_path / "steps.png"
    nulldev = tmp_path / "nulldev"
    if os.geteuid() == 0:
        os.mknod(nulldev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        nulldev = Path(os.devnull)
    before = os.lstat(nulldev)
    done = enginedead(
        "calibrate", "--batch-sizes", "1,8,64", "--steps", "24", "--json", "--plot", str(png),
        "--log", str(nulldev), timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    after = os.lstat(nulldev)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    out = json.loads(done.stdout)
    assert out["log"] == str(nulldev)
    results = out["results"]
    assert [r["batch_size"] for r in results] == [1, 8, 64]
    p50 = [r["p50_s"] for r in results]
    # The bundled model's logits (hidden 256 x vocab 32000) make 64 sequences cost ~3x one
    # even with the other core busy; 1 vs 8 is within noise on this model, so not asserted.
    assert max(p50[0], p50[1]) < p50[2], p50
    # the fit is made on each size's p99 (a deadline is for the worst steps): it grows when they
    # do. On a fast box a 20 ms step's p99 is the other xdist worker's noise, and can fall.
    p99 = [r["p99_s"] for r in results]
    assert out["fit"]["b_s_per_seq"] >= 0, out["fit"]
    if p99[-1] > max(p99[:-1]):
        assert out["fit"]["b_s_per_seq"] > 0, (out["fit"], p99)
    assert all(r["steps"] >= 20 for r in results)
    rec = [r["recommended_s"] for r in results]
    assert rec == sorted(rec) and rec[0] >= STOCK_DEADLINE_S and rec[-1] <= 7200
    assert all(rec_s >= 3 * r["p99_s"] for rec_s, r in zip(rec, results, strict=True))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len({r["start_s"] for r in results}) == 1  # one engine measured them all
