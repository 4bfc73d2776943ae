"""Ranks on CPU: the cores each gets, and what a worker's title says."""

from __future__ import annotations

import pytest

from pytest_enginedead.logic.planning.ranks import (
    binding,
    cores_problem,
    cpu_list,
    parse_cpu_list,
    rank_label,
    ranks_of,
    split_cores,
)


def test_cpu_lists_read_and_written_as_linux_writes_them() -> None:
    assert parse_cpu_list("0-3,8") == [0, 1, 2, 3, 8]
    assert parse_cpu_list("1") == [1]
    assert cpu_list([0, 1, 2, 5]) == "0-2,5" and cpu_list([3]) == "3"
    for bad in ("", "a", "3-1", "1-", ","):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


def test_each_rank_gets_its_own_cores_evenly() -> None:
    """vLLM's syntax, one list per rank: the 2-core box's 0|1; uneven shares go to the first ranks."""
    assert binding([0, 1], 2) == "0|1"
    assert binding([0, 1, 2, 3, 4], 2) == "0-2|3-4"
    assert split_cores([4, 5, 6, 7], 4) == [[4], [5], [6], [7]]
    with pytest.raises(ValueError):
        split_cores([0], 2)


def test_too_few_cores_is_one_line_saying_what_would_do() -> None:
    assert cores_problem([0, 1], 2, "this run") is None
    problem = cores_problem([1], 2, "this xdist worker")
    assert problem is not None and "\n" not in problem
    assert "2 ranks need a core each, and this xdist worker owns 1 (1)" in problem
    assert "fewer ranks" in problem and "VLLM_CPU_OMP_THREADS_BIND" in problem


def test_a_workers_title_names_its_ranks() -> None:
    """vLLM names a worker for each parallel group of more than one (``Worker_TP1``,
    ``Worker_PP1_TP0``); a single rank's worker is plain ``VLLM::Worker``."""
    assert ranks_of("VLLM::Worker_TP1") == {"TP": 1}
    assert ranks_of("VLLM::Worker_PP1_TP0") == {"PP": 1, "TP": 0}
    assert rank_label("VLLM::Worker_PP1_TP0") == "PP1 TP0"
    assert rank_label("VLLM::Worker") == "" and rank_label("python -m pytest") == ""
