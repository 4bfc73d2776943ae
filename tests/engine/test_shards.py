"""``--enginedead-shard``: a suite of two engine configurations split in two, against the same
suite unsharded (the run test_xdist.py makes of it under two workers, shared: its engines are not
started again).  Which tests a shard runs, and so which engines it starts, is decided at
collection: both shards are listed (``--collect-only``), and start nothing here.  The shards run
for real, their verdicts and ``enginedead merge`` of their reports into the unsharded run's table:
tests/unit/commands/test_recorded_runs.py, on the reports of one real run of the whole and both
shards (two more engine starts, each of a configuration the unsharded run starts anyway)."""

from __future__ import annotations

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
)

pytestmark = pytest.mark.engine


def calls(report: dict[str, Any]) -> dict[str, str | None]:
    return {t["nodeid"]: t["verdict"] for t in report["tests"] if t["when"] == "call"}


@pytest.mark.xdist_group("xdist_suite")
def test_two_shards_start_each_configuration_once_and_merge_to_the_whole(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    """Every test of the unsharded run in exactly one shard; each engine configuration in one
    shard only (the shards' configurations add up to the unsharded run's, each shard's tests
    are the unsharded run's tests of its configurations); listing a shard starts nothing."""
    whole = downstream.copy(examples.XDIST_SUITE).shared_run(*TWO_WORKERS, plugins=TWO_WORKERS_PLUGINS).report
    assert whole is not None and "shard" not in whole
    listed = []
    for k in (1, 2):
        result = downstream.run("--collect-only", "-q", f"--enginedead-shard={k}/2", in_subprocess=True,
                                report=True)
        assert result.report is not None and result.report["engines_started"] == 0, result.text[-3000:]
        shard = result.report["shard"]
        assert shard["index"] == k and shard["collected"] == len(calls(whole)), shard
        listed.append(shard)
    kept = [shard["tests"] for shard in listed]
    assert set(kept[0]).isdisjoint(kept[1]) and sorted(kept[0] + kept[1]) == sorted(calls(whole))
    assert sum(shard["engine_configurations"] for shard in listed) == whole["configurations"] == 2
    # each shard holds whole the tests of the unsharded run's engines it keeps
    for tests in kept:
        engines = [e for e in whole["engines"] if set(e["tests"]) & set(tests)]
        assert engines and sorted(t for e in engines for t in e["tests"]) == sorted(tests), (tests, engines)
    assert_nothing_left(*engine_processes(whole), bystander)
