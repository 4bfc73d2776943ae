"""The guard inside vLLM's engine core, under vLLM's stock deadline shortened to 2 s.

A busy worker is waited for (SLOW), up to the guard's cap; a hung one is given up on
after hang_s (HUNG), long before vLLM's own 600 s.  (A crash under the guard is vLLM's
monitor's, as quick as without it: ``xdist_suite``'s ``test_crash``, whose engine it ends
last, where here it would cost a restart after the hang.)
"""

import time

import pytest

from pytest_enginedead import GuardAction, Verdict, assert_no_false_death

pytestmark = [pytest.mark.enginedead_batch_sizes(64), pytest.mark.enginedead_guard(hang_s=3)]


@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.05)
def test_busy_steps_survive_the_stock_deadline(vllm_engine):
    with assert_no_false_death(vllm_engine):
        out = vllm_engine.generate(max_tokens=4)
    assert [len(t) for t in out] == [4] * 64
    long_steps = [s for s in vllm_engine.step_times_since_start() if s.seconds and s.seconds > 2]
    events = vllm_engine.guard_events()
    assert long_steps, "no step outlived the deadline: nothing was tested"
    assert [e.verdict for e in events] == [Verdict.SLOW] * len(long_steps), events
    assert all(e.action is GuardAction.WAIT and e.cap_s >= 600 + 10 * e.batch for e in events)
    # no reply desync: the next batches get exactly their own tokens
    for n, tokens in ((8, 3), (16, 5)):
        out = vllm_engine.generate(n=n, max_tokens=tokens)
        assert [len(t) for t in out] == [tokens] * n


@pytest.mark.enginedead_timeout(600)
@pytest.mark.enginedead_inject(hang_at_step=2)
def test_a_hang_ends_after_hang_s_not_600s(vllm_engine):
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_engine):
            vllm_engine.generate(n=4, max_tokens=8)
    took = time.monotonic() - started
    assert type(info.value).__name__ == "EngineDeadError"
    # the guard ended it, not vLLM's 600 s deadline: within a small share of that deadline
    assert took < 600 / 10, f"the guard took {took:.1f} s to give up on a hung worker (hang_s 3)"
    assert vllm_engine.deaths[-1]["verdict"] == Verdict.HUNG.name
    assert [e.verdict for e in vllm_engine.guard_events()][-1:] == [Verdict.HUNG]


@pytest.mark.enginedead_guard(hang_s=5, policy="edcap:cap")
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.1)
def test_the_guard_never_waits_past_its_cap(vllm_engine):
    """6.4 s steps, a 4 s cap: the engine dies at the cap, a false death with the cap in it.  Its
    two layers take 3.2 s each: within hang_s (5 s), the step advances."""
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=2)
