"""The original report's model family, shrunk: a Gemma-4 mixture-of-experts with dummy weights.

No injection.  Under a 1 s deadline a batch of 8 decodes in ~0.2 s a step and lives;
128 clients arriving 16 per step grow the decode batch until a step outlives the
deadline while the worker computes in the MoE layers: a false death from real compute,
at a decode step, after the first tokens were generated.
"""

from pytest_enginedead import assert_no_false_death


def test_decode_batch_outlives_1s(vllm_engine_factory, request):
    engine = vllm_engine_factory(128, timeout_s=1)
    with assert_no_false_death(engine):
        out = engine.generate(n=8, max_tokens=4, prompt_len=1)
    assert [len(t) for t in out] == [4] * 8
    small = [s.seconds for s in engine.step_times() if s.seconds is not None and s.batch_size == 8]
    assert small and max(small) < 1.0, small
    with assert_no_false_death(engine):
        engine.generate(n=128, max_tokens=16, prompt_len=1, arriving=16)
