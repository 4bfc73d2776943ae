"""No injection: the model's own compute outlives a 1 s deadline at batch 64 (run it
with ``--enginedead-model=fixtures/heavy-llama``)."""

import pytest

from pytest_enginedead import assert_no_false_death


@pytest.mark.enginedead_batch_sizes(2, 64)
@pytest.mark.enginedead_timeout(1)
def test_real_compute(vllm_engine, engine_batch_size):
    # a step's cost follows the tokens it processes: 2 x 1 token is milliseconds,
    # 64 x 64 tokens (one 4096-token step) is seconds even on a fast AVX-512 core
    prompt_len = 1 if engine_batch_size == 2 else 64
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=4, prompt_len=prompt_len)
