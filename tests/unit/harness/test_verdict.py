"""The pieces of the verdict's message: the steps so far, summarized; what each rank was doing."""

from __future__ import annotations

import time

from pytest_enginedead.contract.decisions import Verdict, overall
from pytest_enginedead.contract.steps import StepTime
from pytest_enginedead.harness.liveness import LivenessSettings, ProcessEvidence
from pytest_enginedead.harness.verdict import COMPUTING, WAITING, Finding, rank_states, step_summary


def test_step_summary() -> None:
    t = time.monotonic()
    assert step_summary([]) == "no step had finished"
    assert step_summary([StepTime(1, 8, t, None, 1)]) == "no step had finished"
    steps = [
        StepTime(1, 8, t, 0.5, 1),
        StepTime(2, 64, t, 2.0, 1),
        StepTime(3, 8, t, 0.25, 1),
        StepTime(4, 64, t, None, 1),  # running: not counted
    ]
    assert step_summary(steps) == "3 finished so far, p50 0.500 s, max 2.000 s at batch 64"


def evidence(pid: int, title: str, cores: float, alive: bool = True) -> ProcessEvidence:
    return ProcessEvidence(pid, title, alive, "running" if alive else "gone", cores, 1.0, 0, time.monotonic())


def test_a_rank_idle_inside_its_step_while_a_peer_computes_is_waiting_not_hung() -> None:
    """Tensor-parallel ranks meet at every all-reduce: one computing keeps the other idle inside
    the same step.  That rank is named waiting; the one computing, computing; the engine SLOW."""
    judged = {10: evidence(10, "VLLM::Worker_TP0", 0.01), 11: evidence(11, "VLLM::Worker_TP1", 0.98)}
    verdicts = {10: Verdict.HUNG, 11: Verdict.SLOW}
    states = rank_states(judged, verdicts, in_step={10, 11})
    assert states == {10: ("TP0", WAITING), 11: ("TP1", COMPUTING)}
    assert overall(verdicts.values()) is Verdict.SLOW


def test_ranks_with_nobody_computing_are_idle_and_a_gone_one_is_gone() -> None:
    judged = {10: evidence(10, "VLLM::Worker_TP0", 0.0),
              11: evidence(11, "VLLM::Worker_TP1", 0.0, alive=False)}
    states = rank_states(judged, {10: Verdict.HUNG, 11: Verdict.DEAD}, in_step={10})
    assert states == {10: ("TP0", "idle inside its step"), 11: ("TP1", "gone")}
    idle = rank_states({10: evidence(10, "VLLM::Worker_TP0", 0.0)}, {10: Verdict.HUNG}, in_step=set())
    assert idle == {10: ("TP0", "idle between steps")}


def test_the_message_names_each_rank_and_where_the_computing_one_was() -> None:
    judged = {10: evidence(10, "VLLM::Worker_TP0", 0.01), 11: evidence(11, "VLLM::Worker_TP1", 0.98)}
    finding = Finding(Verdict.SLOW, "EngineDeadError", 2.1, judged, LivenessSettings(),
                      ranks={10: ("TP0", WAITING), 11: ("TP1", COMPUTING)},
                      slow_paths=["the MoE layers run vLLM's per-expert Python loop ... [5 of 6 samples]"])
    text = finding.message()
    assert f"  rank:       TP0: {WAITING}" in text and "  rank:       TP1: computing" in text
    assert "  slow path:  the MoE layers run vLLM's per-expert Python loop" in text
    rows = {p["pid"]: p for p in finding.to_dict()["processes"]}
    assert rows[11]["rank"] == "TP1" and rows[11]["rank_state"] == COMPUTING
    assert finding.to_dict()["slow_paths"]
