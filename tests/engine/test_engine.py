"""Real vLLM CPU engines: the false death reproduced and caught, genuine deaths let through.

Each test runs a downstream suite from ``examples/`` in a subprocess as a downstream
repo would (``pytest -p enginedead``) and reads its JSON report.  Engines are the
expensive part (~15-45 s each), so every inner run shares them: one per distinct
config.  After every run the engine processes it started (from the report, pinned by
pid and creation time) must be gone, with their ``/dev/shm`` segments, while a bystander
process titled ``VLLM::Worker`` that the harness did not start lives on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import psutil
import pytest

from tests.support import examples
from tests.support.downstream import Downstream, Outcome, assert_nothing_left, engine_processes, enginedead
from tests.support.machine import Measures, death_sizes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

pytestmark = pytest.mark.engine


def run_engines(
    downstream: Downstream, *args: str, dynamic: int = 0, timeout: float = 600
) -> tuple[Outcome, dict[str, Any]]:
    """The copied suite under ``pytest -p enginedead -p timeout -rA``, with its report."""
    out = downstream.run("-rA", *args, plugins=["timeout"], in_subprocess=True, report=True, timeout=timeout)
    data = out.report
    assert data is not None
    # one engine per distinct configuration, plus one restart per death a later test
    # needed the engine after (``dynamic``: engines the factory fixture made, which
    # collection cannot plan)
    assert data["engines_started"] == data["configurations"] + data["restarts"] + dynamic, data["engines"]
    deaths = sum(e["false_deaths"] + e["genuine_deaths"] for e in data["engines"])
    assert data["restarts"] <= deaths
    return out, data


@dataclass
class StockRun:
    """The run the stock-deadline tests below read: stock_vs_policy and shared_engine on one
    engine (five tests, the false death last), with a downstream atexit handler beside them."""

    result: Outcome
    data: dict[str, Any]
    #: per test name, its junitxml properties
    junit: dict[str, dict[str, str]]
    #: what ``assert_nothing_left`` said right after the run, with the bystander alive (None: nothing)
    left: str | None
    #: the call rows by test name
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)


_RUN: list[StockRun] = []


def stock_run(downstream: Downstream, bystander: psutil.Process) -> StockRun:
    """The one run of the stock-deadline suites (its first reader makes it; one engine start)."""
    if not _RUN:
        junit = downstream.path / "junit.xml"
        result, data = run_engines(
            downstream.copy(examples.STOCK_VS_POLICY, examples.SHARED_ENGINE, examples.PRINTS_AT_EXIT),
            f"--junitxml={junit}",
        )
        props = {
            str(case.get("name")): {str(p.get("name")): str(p.get("value")) for p in case.iter("property")}
            for case in ElementTree.parse(junit).getroot().iter("testcase")
        }
        try:
            assert_nothing_left(*engine_processes(data), bystander)
            left = None
        except AssertionError as exc:
            left = str(exc)
        rows = {t["nodeid"].split("::")[-1]: t for t in data["tests"] if t["when"] == "call"}
        _RUN.append(StockRun(result, data, props, left, rows))
    return _RUN[0]


#: the tests that read the one run: one xdist worker runs them all (and the smoke set on every release)
ONE_RUN = "stock_vs_policy"


@pytest.mark.xdist_group(ONE_RUN)
@pytest.mark.smoke
def test_the_stock_deadline_kills_the_large_batch_falsely_and_the_policy_lets_it_live(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    """Stock 2 s deadline, busy 0.05 s/seq: batch 2 lives, batch 64 is a false death; the
    reference policy lives through batch 64; shared_engine's two tests live under theirs."""
    run = stock_run(downstream, bystander)
    run.result.assert_outcomes(passed=4, failed=1)
    run.result.stdout.fnmatch_lines_random(
        [
            "PASSED test_stock_vs_policy.py::test_stock_deadline[[]bs2[]]",
            "PASSED test_stock_vs_policy.py::test_reference_policy[[]bs64[]]",
            "PASSED test_shared_engine.py::test_quick_steps_under_5s[[]bs8[]]",
            "PASSED test_shared_engine.py::test_slow_steps_under_the_policy[[]bs8[]]",
            "FAILED test_stock_vs_policy.py::test_stock_deadline[[]bs64[]]*false eng*",
        ]
    )
    assert {name: t["verdict"] for name, t in run.rows.items()} == {
        "test_stock_deadline[bs2]": None,
        "test_stock_deadline[bs64]": "SLOW",
        "test_reference_policy[bs64]": None,
        "test_quick_steps_under_5s[bs8]": None,
        "test_slow_steps_under_the_policy[bs8]": None,
    }


@pytest.mark.xdist_group(ONE_RUN)
@pytest.mark.smoke
def test_the_false_death_says_what_a_person_needs_at_3_am(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    """The worker, its CPU, its step and how long it had run, the deadline and where it came
    from, what the policy allows, the worker's stack, and what to change: no exception chain."""
    out = stock_run(downstream, bystander).result.stdout.str()
    for needle in (
        "false engine death: vLLM raised EngineDeadError while its worker was still computing",
        "VLLM::Worker (pid ",
        "% of a core over the last",
        ", had run ",
        "deadline:   2 s (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=2, set from the enginedead_timeout marker)",
        "policy:     reference allows 1240 s at batch 64 on CPU",
        "worker stack (innermost first):",
        "in burn",
        "what to change:",
    ):
        assert needle in out, needle
    assert "During handling of the above exception" not in out


@pytest.mark.xdist_group(ONE_RUN)
@pytest.mark.smoke
def test_the_engine_died_at_its_own_deadline_mid_step(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    """Its step (64 x 0.05 s = 3.2 s) died past its own 2 s deadline and before the next test's
    deadline (shared_engine's 5 s): the deadline switched per test, on one engine.

    The deadline runs from vLLM's RPC, which the worker picks up a moment later (longer on a
    loaded box), so the step's own age at death may fall short of the deadline; the time since
    the test's call began cannot: the RPC that timed out was sent inside the call."""
    run = stock_run(downstream, bystander)
    out = run.result.stdout.str()
    call = re.search(r"while its worker was still computing \((\d+\.\d) s after the call began\)", out)
    step = re.search(r"step:       step \d+, batch \d+, had run (\d+\.\d) s and was still running", out)
    assert call is not None and step is not None, out[-3000:]
    died = run.rows["test_stock_deadline[bs64]"]
    quick = run.rows["test_quick_steps_under_5s[bs8]"]
    assert died["deadline_s"] <= float(call.group(1)), (call.group(0), died)
    assert float(step.group(1)) <= float(call.group(1)), (step.group(0), call.group(0))
    assert float(step.group(1)) < quick["deadline_s"], (step.group(0), quick)


@pytest.mark.xdist_group(ONE_RUN)
@pytest.mark.smoke
def test_one_engine_served_five_tests_under_their_own_deadlines_and_faults(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    """One start, no restart: the deadlines it ran under are the tests', in run order (by
    batch, the longest deadline first, the death last), and each test's steps are its own faults'
    (0.01 s/seq under 5 s, 0.2 s/seq under the policy's 680 s, at batch 8)."""
    run = stock_run(downstream, bystander)
    data = run.data
    assert data["engines_started"] == 1 and data["restarts"] == 0 and data["configurations"] == 1
    (engine,) = data["engines"]
    assert engine["batch_size"] == 64 and engine["false_deaths"] == 1
    assert engine["deadlines"] == [2, 680, 5, 1240, 2] and engine["steps"] > 0
    quick = run.rows["test_quick_steps_under_5s[bs8]"]
    slow = run.rows["test_slow_steps_under_the_policy[bs8]"]
    assert (quick["deadline_s"], slow["deadline_s"]) == (5, 680)
    assert slow["step_max_s"] >= 8 * 0.2  # its injected burn alone, whatever the machine
    assert quick["step_max_s"] < slow["step_max_s"] / 4  # 0.01 s/seq against 0.2: its own faults


@pytest.mark.xdist_group(ONE_RUN)
@pytest.mark.smoke
def test_the_verdict_comes_within_a_fraction_of_the_deadline(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    """Judging takes no step's time: the verdict comes within a quarter of the deadline it judges."""
    died = stock_run(downstream, bystander).rows["test_stock_deadline[bs64]"]
    (death,) = died["deaths"]
    assert death["verdict_s"] < died["deadline_s"] / 4, death["verdict_s"]
    assert death["deadline_source"] == ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=2, set from the "
                                        "enginedead_timeout marker")


@pytest.mark.xdist_group(ONE_RUN)
@pytest.mark.smoke
def test_the_report_junitxml_and_the_summary_tell_one_story(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    run = stock_run(downstream, bystander)
    (engine,) = run.data["engines"]
    for name, test in run.rows.items():
        mine = run.junit[name]
        assert mine["enginedead_batch_size"] == str(test["batch_size"])
        assert float(mine["enginedead_deadline_s"]) == test["timeout_s"]
        assert mine["enginedead_verdict"] == ("false death" if test["verdict"] == "SLOW" else "ok")
        assert mine["enginedead_step_max_s"] == str(test["step_max_s"])
    out = run.result.stdout.str()
    summary = [ln for ln in out.splitlines() if ln.lstrip().startswith("64  engine  2s,680s,5s,1240s")]
    assert summary, out[-3000:]
    assert summary[0].split()[5] == f"{engine['step_max_s']:.3f}s"
    assert "engines started: 1; restarts after a death: 0;" in out


@pytest.mark.xdist_group(ONE_RUN)
@pytest.mark.smoke
def test_the_time_breakdown_counts_the_one_start_and_every_step(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    run = stock_run(downstream, bystander)
    (engine,) = run.data["engines"]
    t = run.data["time"]
    assert t["engine_starts"] == 1 and t["engine_start_s"] == engine["start_s"] > 0
    assert t["steps"] == engine["steps"] and 0 < t["step_s"] <= t["engine_tests_s"]
    assert t["engine_tests_s"] >= t["engine_start_s"]  # the start is in the first test's setup
    out = run.result.stdout.str()
    assert f"time: engine starts 1 in {t['engine_start_s']:.1f}s" in out
    assert f"time: steps {t['steps']} in {t['step_s']:.1f}s" in out


@pytest.mark.xdist_group(ONE_RUN)
@pytest.mark.smoke
def test_after_pytests_last_line_only_the_suites_own_atexit_output(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    """vLLM's teardown noise is silenced where it starts (no nanobind leak report, no warning of
    the engine core the harness stopped), and the suite's own stdout and stderr stay open: what
    its atexit handler prints after pytest's summary line is printed."""
    result = stock_run(downstream, bystander).result
    lines = [ln for ln in result.stdout.lines if ln.strip()]
    assert re.fullmatch(r"=+ 1 failed, 4 passed in [\d.]+s( \([\d:]+\))? =+", lines[-2]), lines[-2]
    assert lines[-1] == "prints_at_exit: stdout still open", lines[-3:]
    err = result.stderr.str()
    assert "prints_at_exit: stderr still open" in err, err[-3000:]
    for noise in ("nanobind", "leaked", "engine core exited unexpectedly"):
        assert noise not in result.stdout.str() and noise not in err, noise


@pytest.mark.xdist_group(ONE_RUN)
@pytest.mark.smoke
def test_the_run_left_nothing_behind_but_the_decoy(downstream: Downstream, bystander: psutil.Process) -> None:
    """Every engine process it recorded gone, with its /dev/shm entries; the bystander VLLM::Worker
    (no harness started it) alive."""
    assert stock_run(downstream, bystander).left is None


@pytest.mark.smoke
def test_genuine_deaths_propagate(downstream: Downstream, bystander: psutil.Process) -> None:
    """A hung worker (HUNG) is no false death: the original EngineDeadError reaches the test
    unchanged.  Nor is one spinning at a whole core without finishing a layer, on an engine compiled
    as vLLM runs on CPU by default: its CPU said computing, its progress says it stopped.  Every
    step before each went through both of the model's layers, eager and compiled.  (A crashed one,
    DEAD: test_factory_engine_with_explicit_arguments, whose engine it ends.)"""
    result, data = run_engines(downstream.copy(examples.GENUINE_DEATHS), "-s", dynamic=1)
    result.assert_outcomes(passed=2)
    assert data["configurations"] == 1 and data["engines_started"] == 2 and data["restarts"] == 0
    assert sum(e["genuine_deaths"] for e in data["engines"]) == 2
    assert sum(e["false_deaths"] for e in data["engines"]) == 0
    verdicts = [t["verdict"] for t in data["tests"] if t["when"] == "call"]
    assert verdicts == ["HUNG", "HUNG"], verdicts
    spin = r"SPIN verdict=HUNG reasons=.*spinning: \d+ % CPU, no layer finished for"
    assert re.search(spin, result.stdout.str()), result.stdout.str()[-3000:]
    assert_nothing_left(*engine_processes(data), bystander)


def test_real_compute_outlives_short_deadline(
    downstream: Downstream, bystander: psutil.Process, step_cost: Measures,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No injection: a 12-layer dummy Llama, sized from its decode steps on this machine:
    batch 2 lives with half the deadline to spare, the dying batch takes 2.5 deadlines —
    SLOW, from real compute, the worker in the Llama's own code."""
    sizes = death_sizes(step_cost(FIXTURES / "heavy-llama", (2, 16, 32)), most=256, living=(2,))
    if isinstance(sizes, str):
        pytest.skip(sizes)
    print(sizes.describe())
    monkeypatch.setenv("ENGINEDEAD_EXAMPLE_SIZES", json.dumps(
        {"deadline": sizes.deadline_s, "living": sizes.living, "dying": sizes.dying}))
    result, data = run_engines(
        downstream.copy(examples.REAL_COMPUTE), f"--enginedead-model={FIXTURES / 'heavy-llama'}"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [f"FAILED test_real_compute.py::test_real_compute[[]bs{sizes.dying}[]]*false eng*"])
    out = result.stdout.str()
    assert "in burn" not in out  # no injected burn: the worker was in the model
    assert "worker stack (innermost first):" in out
    where = next(line for line in out.splitlines() if line.startswith("  where:"))
    print(where)
    assert "models/llama.py" in where and "Llama" in where, where
    assert data["engines_started"] == 1
    assert data["engines"][0]["false_deaths"] == 1
    assert data["engines"][0]["injection"] == "none"
    assert_nothing_left(*engine_processes(data), bystander)


@pytest.mark.smoke
def test_factory_engine_with_explicit_arguments(downstream: Downstream, bystander: psutil.Process) -> None:
    """vllm_engine_factory: explicit deadline, faults and engine args; stopped afterwards.  Its
    faults end it: a worker that exits at step 2 is a genuine death (DEAD), the original
    EngineDeadError reaching the test unchanged (genuine_deaths' crash, on an engine started
    anyway)."""
    result, data = run_engines(downstream.copy(examples.FACTORY), dynamic=1)
    result.assert_outcomes(passed=1)
    (engine,) = data["engines"]
    assert engine["deadline_s"] == 30 and engine["batch_size"] == 4
    assert engine["deadline_source"] == "vllm_engine_factory(timeout_s=...)"
    assert "max_model_len=256" in engine["label"]
    assert (engine["genuine_deaths"], engine["false_deaths"]) == (1, 0)
    assert_nothing_left(*engine_processes(data), bystander)


def test_malformed_and_unknown_model_are_usage_errors(downstream: Downstream) -> None:
    """A broken config.json or an architecture vLLM lacks (asked of vLLM's real registry): one
    line naming the file, exit 4 — and exactly the same line under ``-n 2``, where the controller
    checks before any test is scheduled, never an INTERNALERROR; the ``enginedead``
    command says the same of its --model (exit 2).  (The factories' model= says it too:
    tests/engine/test_guard.py.)"""
    downstream.copy(examples.NEEDS_ENGINE)
    for model, needle in (
        ("bad-json", "bad-json/config.json is not valid JSON"),
        ("unknown-arch", "unknown-arch/config.json names architecture NoSuchModelForCausalLM, which vLLM"),
    ):
        plain = downstream.run(f"--enginedead-model={FIXTURES / model}", in_subprocess=True, timeout=120)
        n2 = downstream.run(f"--enginedead-model={FIXTURES / model}", "-n", "2", plugins=["xdist"],
                            in_subprocess=True, timeout=180)
        for result in (plain, n2):
            assert result.ret == pytest.ExitCode.USAGE_ERROR, result.text[-3000:]
            assert needle in result.stderr.str()
            assert "Traceback" not in result.text and "INTERNALERROR" not in result.text
        assert [ln for ln in n2.stderr.lines if ln.strip()] == [ln for ln in plain.stderr.lines if ln.strip()]
        done = enginedead("check", "--model", str(FIXTURES / model), timeout=120)
        assert done.returncode == 2 and needle in done.stderr, done.stderr[-2000:]
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
