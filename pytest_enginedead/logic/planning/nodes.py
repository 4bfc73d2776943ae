"""Ranks on several nodes: which ranks each node runs, which cores each gets, what each is told.

vLLM's multi-node executor (multiprocessing, ``--nnodes N``) spreads an engine's ranks
(``tensor_parallel_size`` x ``pipeline_parallel_size``) over N nodes, the same number on
each: node k runs the global ranks ``k * per_node`` up to ``(k + 1) * per_node - 1`` (vLLM's
``local_world_size``), and must divide the ranks evenly.  Node 0, the head, runs the engine
core (an ``LLM`` or the API server) with ``--node-rank 0``; every other node runs vLLM's
headless executor with ``--node-rank k --headless``; all meet at ``--master-addr`` /
``--master-port`` (torch.distributed's store and gloo).  On one machine the harness gives
each node its own share of the cores it owns, and each rank its share of the node's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..inputs.values import MAX_NODES
from .ranks import BIND_ENV, binding, cpu_list, split_cores


def default_ranks(nodes: int, tensor_parallel: int | None) -> int:
    """The tensor-parallel size an engine on ``nodes`` nodes runs with when none was given: one
    rank per node."""
    return tensor_parallel if tensor_parallel is not None else max(1, nodes)


def spread_problem(ranks: int, nodes: int) -> str | None:
    """Why ``ranks`` ranks cannot be spread over ``nodes`` nodes the way vLLM spreads them, or None."""
    if nodes < 1:
        return f"{nodes} nodes: an engine runs on at least one"
    if nodes > MAX_NODES:
        return f"{nodes} nodes: at most {MAX_NODES} here"
    if ranks % nodes:
        return (f"{ranks} rank(s) do not spread evenly over {nodes} nodes: vLLM runs the same number "
                "on each (--nnodes must divide tensor_parallel_size x pipeline_parallel_size)")
    return None


def ranks_of_node(node: int, ranks: int, nodes: int) -> list[int]:
    """The global ranks node ``node`` runs (vLLM's contiguous ``local_world_size`` block)."""
    per = ranks // nodes
    return list(range(node * per, (node + 1) * per))


def node_of_rank(rank: int, ranks: int, nodes: int) -> int:
    """The node a global rank runs on."""
    return rank // max(1, ranks // nodes)


def node_bindings(cores: Sequence[int], nodes: int, ranks: int) -> list[str]:
    """Per node, the ``VLLM_CPU_OMP_THREADS_BIND`` value of its ranks: ``["0", "1"]`` for two
    nodes of one rank on a 2-core box, ``["0|1", "2|3"]`` for two nodes of two ranks on four."""
    per = ranks // nodes
    return [binding(group, per) for group in split_cores(cores, nodes)]


def cores_problem(cores: Sequence[int], nodes: int, ranks: int, owner: str) -> str | None:
    """Why ``ranks`` ranks on ``nodes`` nodes cannot each get a core of ``cores``, in one line."""
    count = len(set(cores))
    if ranks <= count:
        return None
    return (f"{ranks} ranks on {nodes} nodes need a core each, and {owner} owns {count} "
            f"({cpu_list(cores) or 'none'}): run fewer ranks, give it more cores (fewer xdist "
            f"workers), or bind them yourself with {BIND_ENV}")


def node_arguments(node: int, nodes: int, master_addr: str, master_port: int) -> dict[str, Any]:
    """vLLM's multi-node arguments for node ``node`` (the head is 0; the others run headless)."""
    args: dict[str, Any] = {"nnodes": nodes, "node_rank": node, "master_addr": master_addr,
                            "master_port": master_port}
    if node:
        args["headless"] = True
    return args


def node_label(node: int, rank_label: str) -> str:
    """``node 1 TP1``: a rank named with its node."""
    return f"node {node} {rank_label}".rstrip()
