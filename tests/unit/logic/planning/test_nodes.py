"""Ranks on several nodes: which ranks each runs, its cores, its vLLM arguments."""

from __future__ import annotations

import pytest

from pytest_enginedead.logic.inputs.arguments import BadMarker, injection, rank_count
from pytest_enginedead.logic.planning import nodes
from pytest_enginedead.logic.planning.engines import EngineSpec


def test_one_rank_per_node_unless_the_tensor_parallel_size_says_more() -> None:
    assert nodes.default_ranks(2, None) == 2
    assert nodes.default_ranks(2, 4) == 4
    assert nodes.default_ranks(1, None) == 1


@pytest.mark.parametrize(
    ("ranks", "count", "problem"),
    [(2, 2, None), (4, 2, None), (3, 2, "do not spread evenly over 2 nodes"), (2, 0, "at least one"),
     (32, 17, "at most 16")],
)
def test_ranks_spread_evenly_or_the_reason_why_not(ranks: int, count: int, problem: str | None) -> None:
    found = nodes.spread_problem(ranks, count)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_each_node_runs_a_contiguous_block_of_global_ranks() -> None:
    assert [nodes.ranks_of_node(k, 4, 2) for k in range(2)] == [[0, 1], [2, 3]]
    assert [nodes.node_of_rank(r, 4, 2) for r in range(4)] == [0, 0, 1, 1]
    assert [nodes.node_of_rank(r, 2, 2) for r in range(2)] == [0, 1]


def test_cores_are_split_per_node_then_per_rank() -> None:
    assert nodes.node_bindings([0, 1], 2, 2) == ["0", "1"]  # the 2-core box: 2 nodes x 1 rank
    assert nodes.node_bindings([0, 1, 2, 3], 2, 4) == ["0|1", "2|3"]
    assert nodes.node_bindings([0, 1, 2, 3], 2, 2) == ["0-1", "2-3"]
    assert nodes.cores_problem([0, 1], 2, 2, "this run") is None
    problem = nodes.cores_problem([0, 1], 2, 4, "this run")
    assert problem is not None and "4 ranks on 2 nodes need a core each, and this run owns 2 (0-1)" in problem


def test_the_head_and_the_headless_nodes_get_vllms_multi_node_arguments() -> None:
    assert nodes.node_arguments(0, 2, "127.0.0.1", 2345) == {
        "nnodes": 2, "node_rank": 0, "master_addr": "127.0.0.1", "master_port": 2345}
    assert nodes.node_arguments(1, 2, "10.0.0.1", 2345)["headless"] is True
    assert nodes.node_label(1, "TP1") == "node 1 TP1"


def test_an_engine_spec_on_several_nodes_says_so_in_its_label() -> None:
    spec = EngineSpec("/m/tiny", 64, tensor_parallel=2, nodes=2)
    assert spec.label().startswith("n2, tp2, bs64") and spec.ranks_per_node == 1
    served = EngineSpec("/m/tiny", 64, tensor_parallel=2, nodes=2, server=True)
    assert served.label().startswith("server, n2, tp2")
    assert spec != EngineSpec("/m/tiny", 64, tensor_parallel=2)  # not shared with a one-node engine


def test_the_inject_key_nodes_beside_ranks() -> None:
    inj = injection("@pytest.mark.enginedead_inject", {"slow_s_per_seq": 0.05, "nodes": [1]})
    assert inj.nodes == (1,) and inj.ranks is None
    assert inj.applies_to(1, node=1) and not inj.applies_to(0, node=0)
    assert inj.describe() == "busy 0.05 s/seq, on node 1"
    both = injection("x", {"hang_at_step": 2, "nodes": 1, "ranks": [1]})
    assert both.applies_to(1, 1) and not both.applies_to(0, 1) and not both.applies_to(1, 0)
    with pytest.raises(BadMarker, match=r"nodes=\['1'\] must be a list of nodes \(vLLM's --node-rank\)"):
        injection("x", {"nodes": ["1"]})
    with pytest.raises(BadMarker, match=r"nodes=0 is not a whole number >= 1 \(nodes: vLLM's --nnodes\)"):
        rank_count("vllm_engine_factory", "nodes", 0, "nodes: vLLM's --nnodes")


def test_the_control_carries_the_nodes_through_its_file() -> None:
    from pytest_enginedead.contract.control import Control, Injection

    control = Control(3, 2.0, Injection(slow_s_per_seq=0.1, nodes=(1,), ranks=(1,)))
    back = Control.from_json(control.to_json())
    assert back == control and back.injection.nodes == (1,)
    assert Control.from_json('{"epoch": 1, "injection": {"slow_s_per_seq": 0.1}}').injection.nodes is None
