"""``--enginedead-shard K/N``: every test in exactly one shard, each engine configuration whole.

The deal itself, pure; the plugin's part is ``unit/pytest_plugin/test_collection.py``'s.
"""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from pytest_enginedead.logic.inputs.values import Shard
from pytest_enginedead.logic.planning import sharding
from pytest_enginedead.logic.planning.sharding import Durations, ShardError, deal, split, units

# --- the deal --------------------------------------------------------------------------------------


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
        "shard 1/2: 3 tests, 1 engine configuration, balanced by tests and engine starts"
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
