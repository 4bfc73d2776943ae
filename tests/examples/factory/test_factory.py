"""vllm_engine_factory: an engine with an explicit deadline, faults and engine args."""


def test_factory(vllm_engine_factory):
    engine = vllm_engine_factory(4, timeout_s=30, inject={"slow_s_per_seq": 0.01}, max_model_len=256)
    assert engine.timeout_s == 30 and engine.batch_size == 4
    out = engine.generate(max_tokens=3, prompt_len=2)
    assert [len(t) for t in out] == [3, 3, 3, 3]
    steps = engine.step_times()
    assert steps and all(s.seconds >= 0.01 * s.batch_size for s in steps)
    assert all(p.alive for p in engine.liveness().values())
