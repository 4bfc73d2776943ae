"""vllm_engine_factory: an engine with an explicit deadline, faults and engine args.

Its faults: each step busy 0.01 s per sequence, and the worker exits at step 5 (a genuine
death, DEAD: the original EngineDeadError reaches the test).  Step 5 falls in the second call
whatever vLLM does with the first: the first call's four prompts are added one by one, so
vLLM runs them in one to four steps (each finishes in its prefill step), and the second call
runs at least eight.  The crash is this engine's end:
the factory's engine is its own, started anyway, so the crash costs no engine of its own
(``genuine_deaths`` keeps the hang).
"""

import pytest

from pytest_enginedead import Verdict, assert_no_false_death


def test_factory(vllm_engine_factory):
    engine = vllm_engine_factory(4, timeout_s=30, inject={"slow_s_per_seq": 0.01, "crash_at_step": 5},
                                 max_model_len=256)
    assert engine.timeout_s == 30 and engine.batch_size == 4
    out = engine.generate(max_tokens=1, prompt_len=2)  # one to four steps: one token each
    assert [len(t) for t in out] == [1, 1, 1, 1]
    assert all(p.alive for p in engine.liveness().values())
    with pytest.raises(Exception) as info:
        with assert_no_false_death(engine):
            engine.generate(max_tokens=8, prompt_len=2)  # the engine's step 5: the worker exits
    assert type(info.value).__name__ == "EngineDeadError"
    assert engine.deaths[-1]["verdict"] == Verdict.DEAD.name
    steps = [s for s in engine.step_times() if s.seconds is not None]
    assert steps and all(s.seconds >= 0.01 * s.batch_size for s in steps)
