"""What ``enginedead check`` plans and how it reads the regression run's report: pure."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import pytest

from pytest_enginedead.contract.decisions import Verdict
from pytest_enginedead.contract.judge import STALL_FLOOR_S
from pytest_enginedead.logic import releases
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.reporting import checking
from pytest_enginedead.logic.reporting.checkevents import Note, RunDone, event_line, read_event
from pytest_enginedead.logic.reporting.checking import (
    CheckMode,
    CheckPlan,
    Row,
    RunResult,
    format_table,
    plan_for,
    rows_from_report,
    sized_burn,
)

NODE = "test_regression.py::test_decode_batch"


def report_row(nodeid: str, when: str = "call", outcome: str = "passed", verdict: str | None = None,
               **fields: Any) -> dict[str, Any]:
    """One test row of a report, as the plugin writes it: a ``verdict`` is its death's."""
    deaths = [] if verdict is None else [{"verdict": verdict, "error": "EngineDeadError", "elapsed_s": 2.1,
                                          "verdict_s": 0.01, "processes": []}]
    return {
        "nodeid": nodeid, "when": when, "outcome": outcome, "batch_size": 8, "timeout_s": 2.0,
        "deadline_source": "the enginedead_timeout marker", "steps": 3, "step_p50_s": 0.5,
        "step_max_s": 0.75, "step_max_running": False, "verdict": verdict, "deaths": deaths, **fields,
    }


# --- the plan --------------------------------------------------------------------------------


def test_sized_burn_splits_the_sizes_at_their_geometric_mean() -> None:
    """The README's figure: 2 s / sqrt(8 x 64) = 0.0884 s per sequence."""
    burn = sized_burn(BUNDLED_MODEL, 2.0, [8, 64])
    assert burn == 0.0884
    boundary = 2.0 / burn
    assert 8 < boundary < 64 and math.isclose(boundary, math.sqrt(8 * 64), rel_tol=1e-3)
    assert sized_burn(BUNDLED_MODEL, 2.0, [64, 8, 16]) == burn  # min and max, any order
    assert sized_burn(BUNDLED_MODEL, 2.0, [8]) == round(2.0 / 16, 4)  # one size: it fits (2 x 8)


def test_sized_burn_injects_nothing_on_a_real_model(tmp_path: Any) -> None:
    assert sized_burn(str(tmp_path), 2.0, [8, 64]) == 0.0
    assert checking.is_bundled(BUNDLED_MODEL + "/") and not checking.is_bundled(str(tmp_path))


def test_plan_for_the_bundled_model_compresses_the_stock_deadline() -> None:
    plan = plan_for(BUNDLED_MODEL, [4, 16])
    assert plan.stock_s == checking.BUNDLED_STOCK_S == 2
    assert plan.slow_s_per_seq == sized_burn(BUNDLED_MODEL, 2, [4, 16])
    assert plan.modes == (CheckMode.STOCK, CheckMode.POLICY)
    assert plan_for(BUNDLED_MODEL, [4, 16], guard=True).modes == (CheckMode.STOCK, CheckMode.POLICY,
                                                                   CheckMode.GUARD)
    assert plan_for(BUNDLED_MODEL, [4, 16], guard=True, spin=True).modes == tuple(CheckMode)


def test_plan_for_a_real_model_uses_vllms_own_deadline(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(releases.DEADLINE_ENV, raising=False)
    plan = plan_for(str(tmp_path), [8, 64])
    assert (plan.stock_s, plan.slow_s_per_seq) == (300, 0.0)


def test_plan_travels_through_the_environment() -> None:
    plan = CheckPlan(stock_s=3, slow_s_per_seq=0.05, max_tokens=2, prompt_len=1, guard=True, server=True)
    env = plan.to_env()
    assert env[releases.DEADLINE_ENV] == "3"  # vllm-stock then means this deadline
    assert CheckPlan.from_env(env, "/any/model", [1]) == plan
    assert CheckPlan.from_env({}, BUNDLED_MODEL, [4, 16]) == plan_for(BUNDLED_MODEL, [4, 16])


@pytest.mark.parametrize(("raw", "said"), [
    ("not json", "is not JSON: Expecting value"),
    ("[1]", "must hold a JSON object, not list"),
    ('{"stock_s": 2, "slow_s_per_seq": 0.5, "bogus": 1}', "has unknown key(s) 'bogus'; it takes stock_s, "
     "slow_s_per_seq, max_tokens, prompt_len, guard, server"),
    ('{"stock_s": 2}', "lacks 'slow_s_per_seq'"),
    ('{"stock_s": "two", "slow_s_per_seq": 0.5, "max_tokens": "2"}',
     "'stock_s': 'two' is not a whole number"),
    ('{"stock_s": 2, "slow_s_per_seq": [1]}', "'slow_s_per_seq': [1] is not a number of seconds"),
    ('{"stock_s": 2, "slow_s_per_seq": -1}', "'slow_s_per_seq': -1 must be >= 0"),
    ('{"stock_s": 2, "slow_s_per_seq": 0.5, "max_tokens": 0}', "'max_tokens': 0 must be at least 1"),
    ('{"stock_s": 2, "slow_s_per_seq": 0.5, "guard": 1}', "'guard': 1 is not true or false"),
    ('{"stock_s": 1e400, "slow_s_per_seq": 0.5}', "'stock_s': inf is not a whole number"),
    (f'{{"stock_s": {10**13}, "slow_s_per_seq": 0.5}}', f"must be at most {releases.MAX_DEADLINE_S} s"),
])
def test_a_plan_in_the_environment_is_read_like_a_public_variable(raw: str, said: str) -> None:
    """``ENGINEDEAD_CHECK_PLAN`` (``check`` hands it to its regression run): a JSON object of the
    plan's keys, each of its type and range; anything else one line saying what is wrong."""
    with pytest.raises(checking.BadPlan) as info:
        CheckPlan.parse(raw)
    assert said in str(info.value) and "\n" not in str(info.value), info.value
    with pytest.raises(checking.BadPlan):
        CheckPlan.from_env({"ENGINEDEAD_CHECK_PLAN": raw}, BUNDLED_MODEL, [8])


def test_the_plans_keys_are_the_dataclass_fields() -> None:
    import dataclasses

    assert tuple(f.name for f in dataclasses.fields(CheckPlan)) == checking.PLAN_KEYS


# --- reading the report ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodeid", "mode"),
    [
        (f"{NODE}[bs8-stock]", CheckMode.STOCK),
        (f"{NODE}[policy-bs64]", CheckMode.POLICY),
        (f"{NODE}[guard]", CheckMode.GUARD),
        (f"{NODE}[bs8-policystock]", None),
        (f"{NODE}[bs8]", None),
        ("test_stock.py::test_policy", None),
    ],
)
def test_the_mode_is_read_from_the_parameter_id(nodeid: str, mode: CheckMode | None) -> None:
    assert CheckMode.of_nodeid(nodeid) is mode


def test_rows_one_per_test_call_phase_first() -> None:
    report: Mapping[str, Any] = {
        "tests": [
            report_row(f"{NODE}[bs64-policy]", batch_size=64, timeout_s=1240.0, steps=None),
            report_row(f"{NODE}[bs64-stock]", when="setup", outcome="failed", batch_size=64),
            report_row(f"{NODE}[bs8-stock]", verdict=None),
            report_row(f"{NODE}[bs8-stock]", when="teardown", outcome="failed", verdict="HUNG"),
            report_row(f"{NODE}[bs8-policy]"),
            report_row(f"{NODE}[bs64-stock]", batch_size=64, outcome="failed", verdict="SLOW",
                     step_max_s=2.04, step_max_running=True),
        ]
    }
    rows = rows_from_report(report)
    assert [(r.batch_size, r.mode) for r in rows] == [
        (8, CheckMode.STOCK), (8, CheckMode.POLICY), (64, CheckMode.STOCK), (64, CheckMode.POLICY),
    ]
    stock8, _, stock64, policy64 = rows
    assert stock8.verdict is RunResult.OK  # the call phase's row, not the teardown's
    assert stock64.verdict is RunResult.FALSE_DEATH and stock64.max_running and stock64.max_s == 2.04
    assert policy64.steps == 0 and policy64.deadline_s == 1240.0
    assert stock64.deadline_source == "the enginedead_timeout marker"
    assert rows_from_report({}) == []


@pytest.mark.parametrize(
    ("verdict", "outcome", "word"),
    [(None, "passed", "ok"), (None, "failed", "failed"), ("SLOW", "failed", "false death"),
     ("HUNG", "passed", "genuine death"), ("DEAD", "failed", "genuine death")],
)
def test_a_rows_result_is_its_deaths_verdict_or_its_outcome(
    verdict: str | None, outcome: str, word: str
) -> None:
    assert checking.run_result(Verdict.read(verdict), outcome) is RunResult(word)
    [row] = rows_from_report({"tests": [report_row(f"{NODE}[bs8-stock]", verdict=verdict, outcome=outcome)]})
    assert row.verdict is RunResult(word)


def row(batch: int, mode: str, verdict: str = "ok", **kwargs: Any) -> Row:
    fields: dict[str, Any] = {
        "deadline_s": 2.0, "deadline_source": "", "steps": 5, "p50_s": 0.711, "max_s": 0.715, "nodeid": "x",
        **kwargs,
    }
    return Row(batch, CheckMode(mode), verdict=RunResult(verdict), **fields)


def test_format_table() -> None:
    text = format_table([
        row(8, "stock"),
        row(64, "stock", "false death", steps=0, p50_s=None, max_s=2.044, max_running=True),
        row(64, "policy", deadline_s=1240.0, p50_s=5.665, max_s=5.673),
    ])
    assert text.splitlines() == [
        "batch  run      deadline  steps   step p50   step max  verdict",
        "    8  stock          2s      5     0.711s     0.715s  ok",
        "   64  stock          2s      0          -   >=2.044s  false death",
        "   64  policy      1240s      5     5.665s     5.673s  ok",
    ]


def test_a_run_done_is_one_progress_line_and_travels_through_its_file_whole() -> None:
    done = RunDone(64, CheckMode.STOCK, RunResult.FALSE_DEATH, 4, 2.04, 2.3, 41.6)
    assert done.line() == "  batch   64  stock   false death     2.3 s (4 steps, longest 2.04 s)  [42 s]"
    note = Note("engine ready in 31.0 s", 33.2)
    for event in (done, note):
        line = event_line(event)
        assert line.endswith("\n") and line.count("\n") == 1
        assert read_event(line) == event
    assert note.line() == "  engine ready in 31.0 s  [33 s]"


@pytest.mark.parametrize("line", ['["a list"]', '{"batch_size": 8}', '{"mode": "nightly"}', "not json"])
def test_a_line_that_is_no_event_is_refused(line: str) -> None:
    with pytest.raises((ValueError, KeyError)):
        read_event(line)


# --- the verdict line: names each run, and the exit status ----------------------------------------


PLAN = CheckPlan(2, 0.0884)
GUARDED = CheckPlan(2, 0.0884, guard=True)


def test_a_stock_false_death_is_vllms_behaviour_shown_not_a_failure() -> None:
    rows = [row(8, "stock", "ok"), row(8, "policy", "ok"), row(64, "stock", "false death"),
            row(64, "policy", "ok")]
    assert checking.verdict_line(rows, PLAN, "reference", [8, 64]) == (
        "stock vLLM (2 s deadline): FALSE DEATH at batch 64; policy reference: no false death", 0)


def test_no_run_names_ok_alone() -> None:
    """The line never reads as a bare "OK": each run is named, the stock one's deaths included."""
    rows = [row(n, mode, "ok") for n in (8, 64) for mode in ("stock", "policy")]
    line, code = checking.verdict_line(rows, PLAN, "reference", [8, 64])
    assert (line, code) == ("stock vLLM (2 s deadline): no false death; policy reference: no false death", 0)
    assert not line.startswith("OK")


def test_a_false_death_under_the_policy_exits_1() -> None:
    rows = [row(8, "stock", "ok"), row(8, "policy", "ok"), row(64, "stock", "false death"),
            row(64, "policy", "false death")]
    assert checking.verdict_line(rows, PLAN, "vllm-stock", [8, 64]) == (
        "stock vLLM (2 s deadline): FALSE DEATH at batch 64; policy vllm-stock: FALSE DEATH at batch 64", 1)


def test_a_false_death_under_the_guard_exits_1() -> None:
    rows = [row(64, "stock", "false death"), row(64, "policy", "ok"), row(64, "guard", "false death")]
    line, code = checking.verdict_line(rows, GUARDED, "reference", [64])
    assert code == 1
    assert line.endswith("; guard (2 s deadline, policy reference as its cap): FALSE DEATH at batch 64")
    rows[-1] = row(64, "guard", "ok")
    assert checking.verdict_line(rows, GUARDED, "reference", [64])[1] == 0


SPINNING = CheckPlan(2, 0.0884, spin=True)


def test_the_spin_run_must_end_in_a_genuine_death() -> None:
    """A spinning worker under a deadline past the stall window: judged hung (a genuine death) is the
    answer; judged computing (a false death) or no death at all means its layers are not seen."""
    assert SPINNING.modes == (CheckMode.STOCK, CheckMode.POLICY, CheckMode.SPIN)
    assert SPINNING.spin_deadline_s > STALL_FLOOR_S  # it has spun past the window when vLLM gives up
    base = [row(64, "stock", "false death"), row(64, "policy", "ok")]
    line, code = checking.verdict_line([*base, row(64, "spin", "genuine death")], SPINNING, "reference", [64])
    spun = f"; spinning worker ({SPINNING.spin_deadline_s} s deadline): judged hung, a genuine death"
    assert code == 0 and line.endswith(spun)
    for wrong in ("false death", "ok"):
        line, code = checking.verdict_line([*base, row(64, "spin", wrong)], SPINNING, "reference", [64])
        assert code == 1, (wrong, line)
    assert CheckPlan.parse(json.dumps(asdict(SPINNING))) == SPINNING


@pytest.mark.parametrize("mode", ["stock", "policy"])
def test_a_failed_run_exits_1_whichever_run_it_was(mode: str) -> None:
    rows = [row(8, "stock", "ok"), row(8, "policy", "ok")]
    rows[["stock", "policy"].index(mode)] = row(8, mode, "failed")
    line, code = checking.verdict_line(rows, PLAN, "reference", [8])
    assert code == 1 and "FAILED at batch 8 (see the log)" in line


@pytest.mark.parametrize("mode", ["stock", "policy"])
def test_a_run_that_did_not_run_exits_1(mode: str) -> None:
    """A table with a hole in it is no answer."""
    other = "stock" if mode == "policy" else "policy"
    rows = [row(8, "stock"), row(8, "policy"), row(64, other)]
    line, code = checking.verdict_line(rows, PLAN, "reference", [8, 64])
    assert code == 1 and "did not run at batch 64 (see the log)" in line
    no_rows = checking.verdict_line([], PLAN, "reference", [8])
    assert no_rows == ("stock vLLM (2 s deadline): did not run at batch 8 (see the log); "
                       "policy reference: did not run at batch 8 (see the log)", 1)


def test_a_genuine_death_is_not_a_false_one() -> None:
    rows = [row(8, "stock", "genuine death"), row(8, "policy", "genuine death")]
    assert checking.verdict_line(rows, PLAN, "reference", [8]) == (
        "stock vLLM (2 s deadline): no false death; policy reference: no false death", 0)
