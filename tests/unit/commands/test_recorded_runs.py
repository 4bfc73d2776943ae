"""The commands' verdicts on reports recorded from real engine runs (``tests/recorded/``).

What these assert needs no engine: the verdict table and line ``enginedead check`` prints for a
run's report, and ``enginedead merge`` of shard reports.  The engine suite runs the check (the
reference policy, exit 0) and a shard for real; these hold the rest on the real reports of one
real run, in milliseconds, with no engine started.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_enginedead import command
from pytest_enginedead.commands import check
from tests.support.downstream import validated

RECORDED = Path(__file__).resolve().parents[2] / "recorded"


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / name).read_text())
    return validated(data)


def test_check_under_the_stock_policy_exits_1_on_its_false_death(capsys: pytest.CaptureFixture[str]) -> None:
    """``--policy vllm-stock``: the policy runs are stock vLLM too, so the large batch dies under
    the policy as well; the table says so run by run, the last line names both deaths, exit 1.
    (The report: a real ``enginedead check --batch-sizes 4,16 --max-tokens 2 --policy vllm-stock``.)"""
    data = recorded("check-vllm-stock.json")
    assert data["policy"]["name"] == "vllm-stock"
    args = command.build_parser().parse_args(
        ["check", "--batch-sizes", "4,16", "--max-tokens", "2", "--policy", "vllm-stock"])
    assert check.judged(args, check.plan_of(args), data, 1, "/tmp/check.log") == 1
    out = capsys.readouterr().out
    table = out[out.index("batch  run"):]
    rows = [ln for ln in table.splitlines()[1:] if ln.strip() and ln.split()[0].isdigit()]
    lines = {tuple(ln.split()[:2]): ln for ln in rows}
    assert set(lines) == {("4", "stock"), ("4", "policy"), ("16", "stock"), ("16", "policy")}
    assert lines[("4", "stock")].endswith("ok") and lines[("4", "policy")].endswith("ok")
    assert lines[("16", "stock")].endswith("false death") and lines[("16", "policy")].endswith("false death")
    assert out.splitlines()[-1] == (
        "stock vLLM (2 s deadline): FALSE DEATH at batch 16; policy vllm-stock: FALSE DEATH at batch 16")
    assert len(out.splitlines()) < 30


def calls(report: dict[str, Any]) -> dict[str, str | None]:
    return {t["nodeid"]: t["verdict"] for t in report["tests"] if t["when"] == "call"}


def test_merge_of_two_real_shards_is_the_unsharded_runs_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The xdist suite's two shards, each run for real, merge into the table of the same suite
    run whole under two xdist workers: the same tests, the same verdicts, exit 0 (the false
    death is under the stock deadline, the crash genuine)."""
    whole, first, second = (recorded(f"shards/report-{n}.json") for n in ("whole", "1", "2"))
    assert {**calls(first), **calls(second)} == calls(whole)
    verdicts = []
    for paths in ([RECORDED / "shards/report-1.json", RECORDED / "shards/report-2.json"],
                  [RECORDED / "shards/report-whole.json"]):
        code = command.main(["merge", "--json", *map(str, paths)])
        out = capsys.readouterr().out
        assert code == 0, out
        verdicts.append({t["nodeid"]: t["verdict"] for t in json.loads(out)["tests"]})
    assert verdicts[0] == verdicts[1] == calls(whole)
    assert sorted(verdicts[0].values(), key=str) == sorted(["SLOW", None, None, "DEAD"], key=str)
