"""``--enginedead-shard K/N``: every test in exactly one shard, each engine configuration whole.

The deal itself is pure (``sharding``); the plugin's part is run as a downstream repo
would run it, collecting only (no engine starts to tell which tests a shard keeps).
"""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from pytest_enginedead.compat import registry, versions
from pytest_enginedead.logic import sharding
from pytest_enginedead.logic.sharding import Durations, Shard, ShardError, deal, parse_shard, split, units
from tests.support.downstream import Downstream

# --- the deal --------------------------------------------------------------------------------------


def test_parse_shard() -> None:
    assert parse_shard("1/2") == Shard(1, 2) and str(parse_shard(" 3 / 3 ")) == "3/3"
    for bad, why in [("1-2", "is not K/N"), ("0/2", "no shard 0 of 2"), ("3/2", "no shard 3 of 2"),
                     ("1/0", "from 1 to 1000"), ("1/1001", "from 1 to 1000"), ("", "is not K/N"),
                     ("1.5/2", "is not K/N"), ("-1/2", "is not K/N")]:
        with pytest.raises(ShardError, match=re.escape(why)):
            parse_shard(bad)


def test_tests_of_one_configuration_form_one_unit_in_collection_order() -> None:
    found = units(["a", None, "b", "a", None, "b", "a"])
    assert [(u.tests, u.engines) for u in found] == [
        ((0, 3, 6), 1), ((1,), 0), ((2, 5), 1), ((4,), 0),
    ]


def test_deal_is_heaviest_first_to_the_lightest_shard() -> None:
    assert deal([1, 1, 1, 1], 2) == [0, 1, 0, 1]
    assert deal([10, 1, 1, 1, 1], 2) == [0, 1, 1, 1, 1]
    assert deal([5], 3) == [0]  # more shards than units: the others are empty


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_every_test_in_exactly_one_shard_and_configurations_whole(count: int) -> None:
    rng = random.Random(count)
    keys = [rng.choice(["a", "b", "c", "d", None, None]) for _ in range(40)]
    ids = [f"t.py::test_{i}" for i in range(len(keys))]
    shards = [split(keys, ids, Shard(k, count)).keep for k in range(1, count + 1)]
    assert sorted(itertools.chain.from_iterable(shards)) == list(range(len(keys)))
    for key in {k for k in keys if k is not None}:
        holding = [s for s, kept in enumerate(shards) if any(keys[i] == key for i in kept)]
        assert len(holding) == 1, (key, holding)
    assert shards == [split(keys, ids, Shard(k, count)).keep for k in range(1, count + 1)]  # the same deal


def test_without_durations_an_engine_start_weighs_as_ten_tests() -> None:
    keys = ["a"] * 3 + [None] * 13
    ids = [f"t::{i}" for i in range(len(keys))]
    first, second = (split(keys, ids, Shard(k, 2)) for k in (1, 2))
    assert first.keep == [0, 1, 2] and len(second.keep) == 13  # 3 + 10 for the start against 13
    assert first.loads == second.loads == [13.0, 13.0] and first.engines == [1, 0]
    assert first.describe() == (
        "shard 1/2: 3 tests, 1 engine configurations, balanced by tests and engine starts"
    )


def test_recorded_durations_balance_and_unknown_tests_cost_the_median() -> None:
    keys = ["a", "a", None, None, None, "b"]
    ids = ["t::a1", "t::a2", "t::p1", "t::p2", "t::new", "t::b1"]
    durations = Durations({"t::a1": 60.0, "t::a2": 40.0, "t::p1": 1.0, "t::p2": 3.0, "t::b1": 90.0}, "0.32.0")
    first, second = (split(keys, ids, Shard(k, 2), durations) for k in (1, 2))
    # a 100 s, then b 90, "new" (not recorded: the median, 40 s) beside b, then 3 and 1 beside a
    assert first.keep == [0, 1, 2, 3] and second.keep == [4, 5]
    assert first.loads == [104.0, 130.0] and first.by == "recorded durations"


def test_durations_file_round_trip_and_refusals() -> None:
    text = Durations({"t::b": 2.0, "t::a": 1.23456}, "0.32.0").to_json({"cores": 2})
    data = json.loads(text)
    assert data == {"enginedead_durations": 1, "vllm": "0.32.0", "machine": {"cores": 2},
                    "tests": {"t::a": 1.235, "t::b": 2.0}}
    assert sharding.read_durations(text, "f", "0.32.0").seconds == {"t::a": 1.235, "t::b": 2.0}
    head = '{"enginedead_durations": 1, "vllm": "0.32.0", '
    for bad, why in [
        ("[1]", "no 'enginedead_durations' key"),
        ('{"enginedead_durations": 2, "vllm": "0.32.0", "tests": {}}',
         "durations format 2, this plugin reads 1"),
        ('{"enginedead_durations": 1, "vllm": "0.28.0", "tests": {}}',
         "recorded on vLLM '0.28.0', this run has"),
        (head + '"tests": []}', "'tests' must map test ids to seconds"),
        (head + '"tests": {"x": -1}}', "'x' has -1, not a number"),
        (head + '"tests": {"x": true}}', "'x' has True, not a number"),
        ('{"enginedead_durations": 1,', "not JSON"),
    ]:
        with pytest.raises(ShardError, match=re.escape(why)):
            sharding.read_durations(bad, "f", "0.32.0")
    assert sharding.durations_path("d/vllm-{vllm}.json", "0.28.0") == "d/vllm-0.28.0.json"
    assert sharding.durations_path("d/{vllm}.json", None) == "d/none.json"


# --- the plugin: a downstream suite of three engine configurations and plain tests ----------------

SUITE = '''
import pytest


def test_plain_1():
    pass


def test_plain_2():
    pass


@pytest.mark.enginedead_batch_sizes(2, 8)
def test_a_first(vllm_engine):
    pass


@pytest.mark.enginedead_batch_sizes(8)
def test_a_second(vllm_engine):
    pass


@pytest.mark.enginedead_guard(hang_s=5)
def test_b_guarded(vllm_engine):
    pass


@pytest.mark.enginedead_batch_sizes(4)
def test_c_server(vllm_server):
    pass


def test_plain_3():
    pass
'''


@pytest.fixture
def suite(downstream: Downstream, monkeypatch: pytest.MonkeyPatch) -> Downstream:
    """The suite above; the model check asks a stand-in registry (no vLLM import to collect)."""
    monkeypatch.setattr(registry, "known_architectures", lambda: {"LlamaForCausalLM"})
    downstream.pytester.makepyfile(test_suite=SUITE)
    return downstream


def collected(downstream: Downstream, *args: str) -> tuple[list[str], str]:
    result = downstream.run("--collect-only", "-q", *args)
    assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
    ids = [ln for ln in result.stdout.lines if re.match(r"test_\w+\.py::", ln)]
    return ids, result.stdout.str()


def configuration(nodeid: str) -> str:
    """Which engine the suite's test gets: a, b (guarded), c (server), or its own name (plain)."""
    name = nodeid.split("::")[1]
    return name.split("_")[1] if not name.startswith("test_plain") else name


@pytest.mark.parametrize("count", [2, 3])
def test_shards_of_a_suite_hold_every_test_once_and_each_engine_whole(suite: Downstream, count: int) -> None:
    everything, _ = collected(suite)
    assert len(everything) == 9  # the guarded test runs at the default 8 and 64
    shards = []
    for k in range(1, count + 1):
        ids, out = collected(suite, f"--enginedead-shard={k}/{count}")
        assert f"enginedead: shard {k}/{count}: {len(ids)} tests, " in out
        shards.append(ids)
    assert sorted(itertools.chain.from_iterable(shards)) == sorted(everything)
    for config in ("a", "b", "c"):
        assert sum(any(configuration(t) == config for t in ids) for ids in shards) == 1, (config, shards)
    engines = [sum(1 for c in {configuration(t) for t in ids} if c in "abc") for ids in shards]
    assert sum(engines) == 3  # no configuration starts in two shards


def test_one_shard_of_one_is_the_whole_suite(suite: Downstream) -> None:
    everything, _ = collected(suite)
    ids, out = collected(suite, "--enginedead-shard=1/1")
    assert ids == everything
    assert ("enginedead: shard 1/1: 9 tests, 3 engine configurations, "
            "balanced by tests and engine starts") in out


def test_durations_recorded_by_one_run_balance_the_next(suite: Downstream) -> None:
    """``--enginedead-store-durations`` writes what ``--enginedead-durations`` reads, ``{vllm}``
    naming the release; the guarded engine's tests recorded as heavy get a shard of their own."""
    release = versions.installed_version() or "none"
    path = suite.path / f"durations-{release}.json"
    everything, _ = collected(suite)
    seconds = {t: 500.0 if configuration(t) == "b" else 2.0 for t in everything}
    path.write_text(Durations(seconds, release).to_json())
    ids, out = collected(suite, "--enginedead-shard=1/2", "--enginedead-durations=durations-{vllm}.json")
    assert ids == ["test_suite.py::test_b_guarded[bs8]", "test_suite.py::test_b_guarded[bs64]"], ids
    assert "balanced by recorded durations" in out


def test_durations_are_stored_under_xdist_for_the_shard_that_ran(downstream: Downstream) -> None:
    """Under ``-n 2`` each shard keeps the same tests, and the controller writes every test's time."""
    downstream.pytester.makepyfile(test_plain="""
        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_p(i):
            pass
    """)
    plain, _ = collected(downstream, "--enginedead-shard=2/3")
    result = downstream.run("-p", "xdist", "-n", "2", "--enginedead-shard=2/3",
                            "--enginedead-store-durations=d.json", in_subprocess=True, timeout=120,
                            report=True)
    assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
    assert result.outcomes.get("passed") == len(plain) == 2
    assert result.report is not None  # the report says which shard, and its tests (for a merge)
    assert result.report["shard"] == {
        "index": 2, "count": 3, "collected": 6, "tests": plain, "engine_configurations": 0,
        "balanced_by": "tests and engine starts",
    }
    data = json.loads((downstream.path / "d.json").read_text())
    assert sorted(data["tests"]) == sorted(plain)
    assert data["vllm"] == (versions.installed_version() or "none") and "machine" in data
