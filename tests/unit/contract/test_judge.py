"""The judge's rules, each on both sides: a step that advances is SLOW whatever its CPU does; one
that stopped advancing for the stall window is HUNG, spinning or idle; phases outside the layers
are judged by CPU; across ranks a gone one is DEAD and a computing one makes the engine SLOW."""

from __future__ import annotations

import pytest

from pytest_enginedead.contract.decisions import Verdict
from pytest_enginedead.contract.judge import (
    STALL_FLOOR_S,
    STALL_MULTIPLE,
    RankEvidence,
    RankState,
    judge_rank,
    judge_ranks,
    stall_window_s,
)
from pytest_enginedead.contract.stepprogress import Phase, StepProgress

NOW = 1000.0


def progress(phase: Phase = Phase.FORWARD, layer: int = 13, layers: int = 30, began: float = 700.0,
             forward_at: float = 701.0, advanced: float = 990.0, pace_s: float = 0.5) -> StepProgress:
    return StepProgress(7, phase, layer, layers, began, forward_at, advanced, pace_s)


def rank(cores: float = 1.0, p: StepProgress | None = None, alive: bool = True, in_step: bool = True,
         collective: float | None = None, label: str = "TP0") -> RankEvidence:
    return RankEvidence(label, alive, cores, 1.0, in_step, p, collective)


def test_the_stall_window_is_a_floor_or_a_multiple_of_the_runs_pace() -> None:
    assert stall_window_s(0.0) == STALL_FLOOR_S
    assert stall_window_s(0.01) == STALL_FLOOR_S  # a fast model: scheduling noise decides
    assert stall_window_s(10.0) == STALL_MULTIPLE * 10.0  # long layers: the run's own pace
    assert stall_window_s(0.01, 5.0) == 5.0  # the guard's hang_s is the floor
    assert stall_window_s(10.0, 5.0) == STALL_MULTIPLE * 10.0  # and never shortens the pace's window


def test_a_step_that_advances_with_its_cpu_computes_and_one_idle_since_its_last_layer_is_hung() -> None:
    """Computing needs both: layers finishing, and the CPU to finish the next one.  A worker idle
    since its last layer (a hang between two layers) is not computing, however recent the layer."""
    idle = judge_rank(rank(0.0, progress(advanced=NOW - 2.0)), NOW)
    assert (idle.verdict, idle.state, idle.active_at) == (Verdict.HUNG, RankState.IDLE_IN_STEP, NOW - 2.0)
    assert idle.reason.startswith("idle: 0 % CPU, no layer finished for 2.0 s, last layer 12 of 30")
    j = judge_rank(rank(1.0, progress(advanced=NOW - 2.0)), NOW)
    assert (j.verdict, j.state, j.active_at) == (Verdict.SLOW, RankState.COMPUTING, NOW - 2.0)
    assert j.reason.startswith("computing: layer 13 of 30 after 300.0 s, advanced 2.0 s ago")
    # 12 layers finished in the 297 s since the first began: 24.75 s each; 18 left, 2 s into the current
    assert j.ends_in_s == pytest.approx(18 * 297.0 / 12 - 2.0)
    assert j.reason.endswith("ends in ~444 s")


def test_a_step_that_stopped_advancing_while_spinning_is_hung() -> None:
    """A livelock: a whole core busy, no layer finished for longer than the stall window."""
    stalled = STALL_FLOOR_S + 32.0
    j = judge_rank(rank(1.0, progress(advanced=NOW - stalled)), NOW)
    assert (j.verdict, j.state) == (Verdict.HUNG, RankState.SPINNING)
    assert j.reason == f"spinning: 100 % CPU, no layer finished for {stalled:.1f} s, last layer 12 of 30"
    assert j.active_at == NOW - stalled  # the hang's clock runs from its last advance


def test_a_step_that_stopped_advancing_while_idle_is_hung() -> None:
    j = judge_rank(rank(0.0, progress(advanced=NOW - 60.0)), NOW)
    assert (j.verdict, j.state) == (Verdict.HUNG, RankState.IDLE_IN_STEP)
    assert j.reason.startswith("idle: 0 % CPU, no layer finished for 60.0 s")


def test_the_window_follows_the_runs_pace_not_one_boxs_seconds() -> None:
    """Layers of 20 s each (a long prefill on a big model): 30 s without a layer is their pace, under
    the harness's floor and under a guard whose hang_s (5 s) is shorter than one layer — a layer is
    not a hang for being slower than hang_s; past four of its paces it is."""
    long_layers = progress(advanced=NOW - 30.0, pace_s=20.0)
    assert judge_rank(rank(1.0, long_layers), NOW).verdict is Verdict.SLOW
    assert judge_rank(rank(1.0, long_layers), NOW, window_s=5.0).verdict is Verdict.SLOW
    stuck = progress(advanced=NOW - STALL_MULTIPLE * 20.0 - 1.0, pace_s=20.0)
    assert judge_rank(rank(1.0, stuck), NOW, window_s=5.0).state is RankState.SPINNING
    # where the pace is short the guard's hang_s is the window: a spin is ended after it
    spin = progress(advanced=NOW - 6.0, pace_s=0.01)
    assert judge_rank(rank(1.0, spin), NOW, window_s=5.0).state is RankState.SPINNING
    assert judge_rank(rank(1.0, progress(advanced=NOW - 4.0, pace_s=0.01)), NOW, window_s=5.0).verdict \
        is Verdict.SLOW


@pytest.mark.parametrize(("phase", "cores", "verdict"), [
    (Phase.PREPARE, 1.0, Verdict.SLOW), (Phase.PREPARE, 0.0, Verdict.HUNG),
    (Phase.SAMPLE, 1.0, Verdict.SLOW), (Phase.SAMPLE, 0.0, Verdict.HUNG),
])
def test_outside_the_layers_a_step_is_judged_by_its_cpu(phase: Phase, cores: float, verdict: Verdict) -> None:
    """Preparing a step (a compile) or sampling is never judged by the layers' pace, however long."""
    j = judge_rank(rank(cores, progress(phase=phase, advanced=NOW - 600.0)), NOW)
    assert j.verdict is verdict
    assert (j.active_at == NOW) is (verdict is Verdict.SLOW)


def test_without_a_progress_record_the_cpu_decides() -> None:
    assert judge_rank(rank(1.0), NOW).verdict is Verdict.SLOW
    assert judge_rank(rank(0.01), NOW).verdict is Verdict.HUNG


def test_a_sleepers_stray_ticks_are_not_cpu() -> None:
    """Two ticks of 10 ms in a quarter of a second read 8 % of a core: not a whole window's worth."""
    ev = RankEvidence("TP0", True, 0.08, 0.25, True)
    assert judge_rank(ev, NOW).verdict is Verdict.HUNG


def test_gone_collective_and_between_steps() -> None:
    assert judge_rank(rank(alive=False), NOW).verdict is Verdict.DEAD
    idle = judge_rank(rank(0.0, in_step=False), NOW)
    busy = judge_rank(rank(1.0, in_step=False), NOW)
    assert (idle.verdict, idle.state) == (Verdict.HUNG, RankState.IDLE_BETWEEN)
    assert (busy.verdict, busy.state) == (Verdict.HUNG, RankState.BUSY_OUTSIDE)
    waiting = judge_rank(rank(1.0, progress(advanced=NOW - 0.5), collective=0.3), NOW)
    assert (waiting.verdict, waiting.state) == (Verdict.HUNG, RankState.WAITING)
    brief = judge_rank(rank(1.0, progress(advanced=NOW - 0.5), collective=0.05), NOW)
    assert brief.verdict is Verdict.SLOW  # a collective's healthy microseconds are not a wait


def test_across_ranks_dead_beats_slow_beats_hung() -> None:
    computing, spinning = rank(1.0, progress(advanced=NOW - 1.0)), rank(1.0, progress(advanced=NOW - 60.0))
    waiting = rank(1.0, progress(advanced=NOW - 1.0), collective=5.0, label="TP1")
    assert judge_ranks([computing, waiting], NOW).verdict is Verdict.SLOW
    assert judge_ranks([spinning, waiting], NOW).verdict is Verdict.HUNG
    assert judge_ranks([computing, rank(alive=False)], NOW).verdict is Verdict.DEAD
    engine = judge_ranks([spinning, waiting], NOW)
    busiest = engine.busiest()
    assert busiest is not None and busiest.state is RankState.SPINNING  # the rank that stopped the step
    assert engine.active_at == NOW - 60.0


def test_a_rank_idle_in_its_step_while_a_peer_computes_waits_for_it() -> None:
    """Without collective marks (an older plugin on the rank), an idle rank beside a computing one
    is taken to wait in a collective; beside none, it is idle."""
    idle = rank(0.0, label="TP1")
    engine = judge_ranks([rank(1.0), idle], NOW)
    assert [j.state for j in engine.ranks] == [RankState.COMPUTING, RankState.WAITING]
    alone = judge_ranks([idle], NOW)
    assert (alone.verdict, alone.ranks[0].state) == (Verdict.HUNG, RankState.IDLE_IN_STEP)
