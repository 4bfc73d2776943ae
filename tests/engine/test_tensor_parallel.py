"""Two tensor-parallel ranks on CPU: started, served, and judged rank by rank.

One downstream run (``examples.TENSOR_PARALLEL``) with ``--enginedead-tensor-parallel-size=2``:
the harness binds one core per rank (the 2-core box's ``0|1``), a fault goes to one rank
(``inject(ranks=[1])``), and the verdict, the guard and the report say which rank did what.
Engines: one per configuration (plain, guarded, served), each ended by its last test's death.
"""

from __future__ import annotations

import os
import re

import psutil
import pytest

from pytest_enginedead.invllm.watch import FIRST_PROBE_S, PROBE_EVERY_S
from tests.support import examples
from tests.support.downstream import Downstream, assert_nothing_left, engine_processes

from .test_engine import run_engines

pytestmark = pytest.mark.engine

HANG_S = 5.0
#: how long the rank that does not hang may compute its part of the step before it waits for
#: its peer (seconds: a batch-8 step at two ranks took 0.03-0.35 s quiet, 4.5 s under load)
PEER_PART_S = 10.0


@pytest.mark.smoke
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two ranks need two cores")
def test_two_ranks_each_judged_on_their_own(
    downstream: Downstream, decoy: psutil.Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stock 2 s deadline, rank 1 busy 3.2 s per step: a false death that names rank 1 computing
    and rank 0 waiting for it; under the guard, rank 1 slow: the step lives and the guard's
    decisions name rank 1; rank 1 idle inside its step: HUNG within hang_s and a probe period; a
    server with two ranks answers, and rank 1 killed behind it: DEAD.  Three engines: each
    configuration's death is its last test."""
    # a rank a core: the inner run binds both ranks from every core (this xdist worker's share is one)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    # under the outer test's 900 s: three engines of two ranks on a loaded 2-core box took 600 s once
    result, data = run_engines(
        downstream.copy(examples.TENSOR_PARALLEL), "-s", "--enginedead-tensor-parallel-size=2",
        "--enginedead-batch-sizes=64", timeout=840,
    )
    result.assert_outcomes(passed=5, failed=1)
    out = result.stdout.str()
    # (the summary line's reason is cut to the terminal's width: the death's own lines are below)
    result.stdout.fnmatch_lines(
        ["FAILED test_tensor_parallel.py::test_stock_deadline_false_death[[]bs64[]]*"])
    assert "false engine death: vLLM raised EngineDeadError while its worker was still computing" in out
    # the evidence, rank by rank: the computing rank named, the waiting one not taken for hung
    assert re.search(r"process:    VLLM::Worker_TP1 \(pid \d+\): \w+, \d+ % of a core", out), out
    assert "rank:       TP1: computing" in out
    assert "rank:       TP0: waiting for a peer rank inside its step" in out
    assert "where:      rank TP1: " in out and "in burn" in out
    ranks = re.search(r"RANKS \[(.*)\]", out)
    assert ranks is not None and "VLLM::Worker_TP0" in ranks.group(1) and "VLLM::Worker_TP1" in ranks.group(1)
    assert re.search(r"SERVER RANKS \[.*VLLM::Worker_TP0.*VLLM::Worker_TP1", out)
    hung = re.search(r"HUNG ended after ([\d.]+) s", out)
    assert hung is not None
    # ended once no rank had computed for hang_s: never sooner, and long before vLLM's own 30 s
    # deadline. The rank that does not hang computes its part of the step before it waits in the
    # collective, and the idle clock starts then: on a quiet box the wait ended 5.15-5.17 s into
    # the call (hang_s 5 + the first look), with other engines beside it 9.5 s.
    waited = float(hung.group(1))
    assert HANG_S <= waited <= HANG_S + FIRST_PROBE_S + 2 * PROBE_EVERY_S + PEER_PART_S, hung.group(0)
    # the engines carry their ranks in their labels and the report
    labels = {e["label"] for e in data["engines"]}
    heads = [label.split(", ")[:2] for label in labels]
    assert heads and all(head in (["tp2", "bs64"], ["server", "tp2"]) for head in heads), labels
    assert data["engines_started"] == 3 and data["restarts"] == 0, data["engines"]
    assert "KILLED verdict=DEAD" in out
    assert_nothing_left(*engine_processes(data), decoy)
