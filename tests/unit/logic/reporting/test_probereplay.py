"""Probe settings replayed over sampled answers: when would a kubelet have restarted the server?"""

from __future__ import annotations

from pytest_enginedead.contract.decisions import Verdict
from pytest_enginedead.logic.reporting import probereplay


def samples(
    fail_from: float, until: float, latency: float = 0.01, slow: float | None = None
) -> list[probereplay.Sample]:
    """A probe sampled every 0.5 s over 0..until: fine before ``fail_from``, failing after
    (or, with ``slow``, answering 200 after ``slow`` seconds)."""
    out = []
    t = 0.0
    while t <= until:
        if t < fail_from:
            out.append(probereplay.Sample(t, latency, True))
        elif slow is not None:
            out.append(probereplay.Sample(t, slow, True))
        else:
            out.append(probereplay.Sample(t, None, False))
        t += probereplay.SAMPLE_S
    return out


K8S = probereplay.Setting("k8s", 10, 1, 3, "defaults")


def test_replay_kills_after_threshold_failures_in_a_row() -> None:
    # probes at 0, 10, 20, 30...: failing from 5 s on, the third failure in a row is at 30 s
    assert probereplay.replay(samples(5, 60), K8S, 0.0, 60) == 31.0  # + its 1 s timeout
    assert probereplay.replay(samples(100, 60), K8S, 0.0, 60) is None
    assert probereplay.replay(samples(5, 60), K8S, 0.0, 25) is None  # the window ends first


def test_replay_counts_a_slow_answer_as_a_failure_only_past_the_timeout() -> None:
    queued = samples(0, 60, slow=3.2)  # a completion queued behind a 3.2 s step
    assert probereplay.replay(queued, K8S, 0.0, 60) == 21.0
    patient = probereplay.Setting("patient", 10, 15, 10, "benchmark")
    assert probereplay.replay(queued, patient, 0.0, 60) is None


def test_replay_resets_on_a_success_and_skips_gaps() -> None:
    flaky = [s if not (9.5 <= s.t <= 10.5) else probereplay.Sample(s.t, 0.01, True) for s in samples(5, 60)]
    assert probereplay.replay(flaky, K8S, 0.0, 60) == 41.0  # the success at 10 s restarts the count
    gap = [s for s in samples(5, 60) if not 19 <= s.t <= 21]
    # no sample near 20 s: that probe counts neither way, the third failure is at 40 s
    assert probereplay.replay(gap, K8S, 0.0, 60) == 41.0


def test_cells_say_false_kill_dead_anyway_and_found() -> None:
    run = probereplay.Run(Verdict.SLOW, True, 60, samples={"GET /health": samples(5, 60)})
    assert probereplay.cell(run, "GET /health", K8S) == "FALSE KILL at 31s"
    run.died_after_s = 2.1
    assert probereplay.cell(run, "GET /health", K8S) == "dead at 2.1s anyway"
    assert probereplay.cell(run, "1-token completion", K8S) == "no kill in 60s"
    hung = probereplay.Run(Verdict.HUNG, True, 60, samples={"GET /health": samples(5, 60)})
    assert probereplay.cell(hung, "GET /health", K8S) == "found at 31s"
    assert probereplay.cell(hung, "GET /v1/models", K8S) == "not found in 60s"
    text = probereplay.table([run, hung])
    assert text.splitlines()[0].split()[:2] == ["probe", "setting"]
    assert "SLOW, guard on" in text and "HUNG, guard on" in text and "died at 2.1s" in text
    data = probereplay.to_json([run, hung])
    assert data["runs"][1]["probes"]["GET /health"]["kill_after_s"]["kubernetes defaults"] == 31.0
    assert data["runs"][0]["probes"]["GET /health"]["first_failure_s"] == 5.0
    assert data["runs"][0]["probes"]["GET /health"]["says"]["kubernetes defaults"] == "dead at 2.1s anyway"


def test_a_setting_of_ones_own_is_replayed() -> None:
    mine = probereplay.parse_setting("mine=5/2/3")
    assert mine == probereplay.Setting("mine", 5.0, 2.0, 3, "--setting")
    run = probereplay.Run(Verdict.HUNG, True, 60, samples={"enginedead probe": samples(12, 60)})
    # 15, 20, 25 failed; +2 s timeout
    assert probereplay.cell(run, "enginedead probe", mine) == "found at 27s"
    assert "mine (5s/2s/x3)" in probereplay.table([run], (*probereplay.SETTINGS, mine))


def test_answers_count_what_was_sent_from_the_states_start() -> None:
    """Samples before t0 are the load's ramp, not the state; a sample without an answer is sent,
    not answered; a refused probe answered (failing)."""
    sent = [probereplay.Sample(0.0, 9.0, True), probereplay.Sample(1.0, 0.1, True),
            probereplay.Sample(1.5, 0.3, False), probereplay.Sample(2.0, None, False),
            probereplay.Sample(2.5, 1.4, True)]
    assert probereplay.answers(sent, 1.0) == probereplay.Answers(4, 3, 0.3, 1.4)
    assert probereplay.answers(sent, 3.0) == probereplay.Answers(0, 0, None, None)
    run = probereplay.Run(Verdict.SLOW, True, 60, samples={"enginedead probe": sent}, t0=1.0)
    conditions = probereplay.Conditions(60, 0.5, 2, 64, 0.05, 30, 10)
    data = probereplay.to_json([run], conditions=conditions)
    assert data["runs"][0]["probes"]["enginedead probe"]["answers"] == {
        "sent": 4, "answered": 3, "median_s": 0.3, "max_s": 1.4}
    assert data["conditions"]["slow_clients"] == 64 and data["conditions"]["hang_s"] == 10
