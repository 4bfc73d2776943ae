"""``--enginedead-shard``: a suite of two engine configurations split in two, run one shard
after the other, against the same suite unsharded (the run test_xdist.py makes of it under two
workers, shared: its engines are not started again); then ``enginedead merge`` of the shards."""

from __future__ import annotations

import json
import time
from typing import Any

import psutil
import pytest

from tests.support import examples
from tests.support.downstream import (
    TWO_WORKERS,
    TWO_WORKERS_PLUGINS,
    Downstream,
    assert_nothing_left,
    engine_processes,
    enginedead,
)

pytestmark = pytest.mark.engine


def calls(report: dict[str, Any]) -> dict[str, str | None]:
    return {t["nodeid"]: t["verdict"] for t in report["tests"] if t["when"] == "call"}


@pytest.mark.xdist_group("xdist_suite")
def test_two_shards_start_each_configuration_once_and_merge_to_the_whole(
    downstream: Downstream, decoy: psutil.Process
) -> None:
    """Every test in exactly one shard; each engine configuration started in one shard only
    (the engines of both shards = the unsharded run's); the same verdicts; ``enginedead
    merge`` of the two shard reports gives the unsharded run's table, exit 0 (the false
    death is under the stock deadline, the crash genuine), and nothing is left behind."""
    whole_run = downstream.copy(examples.XDIST_SUITE).shared_run(*TWO_WORKERS, plugins=TWO_WORKERS_PLUGINS)
    reports: dict[str, dict[str, Any]] = {}
    walls: dict[str, float] = {"whole": whole_run.result.duration}
    for name, args in (("whole", None), ("1", ("--enginedead-shard=1/2",)),
                       ("2", ("--enginedead-shard=2/2",))):
        if args is None:
            result = whole_run
        else:
            t0 = time.monotonic()
            result = downstream.run("-rA", *args, plugins=["timeout"], in_subprocess=True, report=True)
            walls[name] = time.monotonic() - t0
        assert result.report is not None
        reports[name] = result.report
        (downstream.path / f"report-{name}.json").write_text(json.dumps(result.report))
    print(f"walls: shard 1/2 {walls['1']:.1f}s, shard 2/2 {walls['2']:.1f}s; unsharded under -n 2 "
          f"{walls['whole']:.1f}s")
    whole, first, second = reports["whole"], reports["1"], reports["2"]
    assert "shard" not in whole
    kept = [first["shard"]["tests"], second["shard"]["tests"]]
    assert set(kept[0]).isdisjoint(kept[1]) and sorted(kept[0] + kept[1]) == sorted(calls(whole))
    assert {**calls(first), **calls(second)} == calls(whole)
    labels = [{e["label"] for e in r["engines"]} for r in (first, second)]
    assert labels[0] and labels[1] and labels[0].isdisjoint(labels[1])
    assert first["engines_started"] + second["engines_started"] == whole["engines_started"] >= 2
    merged = enginedead("merge", "--json", str(downstream.path / "report-1.json"),
                        str(downstream.path / "report-2.json"))
    alone = enginedead("merge", "--json", str(downstream.path / "report-whole.json"))
    assert merged.returncode == alone.returncode == 0, merged.stdout + merged.stderr
    verdicts = [{t["nodeid"]: t["verdict"] for t in json.loads(m.stdout)["tests"]} for m in (merged, alone)]
    assert verdicts[0] == verdicts[1] == calls(whole)
    assert sorted(verdicts[0].values(), key=str) == sorted(["SLOW", None, None, "DEAD"], key=str)
    for r in reports.values():
        assert_nothing_left(*engine_processes(r), decoy)
