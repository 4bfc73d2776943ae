"""The original report's model family, shrunk: a Gemma-4 mixture-of-experts with dummy weights.

No injection.  Under a short deadline a small batch decodes and lives; then requests
arrive as a server's clients would: a few first, which make their first tokens, and the
rest before the next step, so that one step carries those decodes beside the newcomers,
sized to outlive the deadline: a false death from real compute, with the worker in the
MoE layers.

The sizes (``ENGINEDEAD_EXAMPLE_SIZES``: the deadline, the batch that lives, the batch
that dies) come from decode steps measured on the machine that runs it
(tests/engine/test_gemma.py); the defaults are the 2-core box the suite was written on.
"""

import json
import os

from pytest_enginedead import assert_no_false_death

SIZES = json.loads(os.environ.get("ENGINEDEAD_EXAMPLE_SIZES", '{"deadline": 1, "living": 8, "dying": 320}'))


def test_decode_batch_outlives_the_deadline(vllm_engine_factory):
    deadline, living, dying = SIZES["deadline"], SIZES["living"], SIZES["dying"]
    engine = vllm_engine_factory(dying, timeout_s=deadline)
    with assert_no_false_death(engine):
        out = engine.generate(n=living, max_tokens=4, prompt_len=1)
    assert [len(t) for t in out] == [4] * living
    lived = [s.seconds for s in engine.step_times() if s.seconds is not None and s.batch_size == living]
    assert lived and max(lived) < deadline, lived
    with assert_no_false_death(engine):
        # step 1: `living` requests prefill (and live); step 2: they decode beside the rest
        engine.generate(n=dying, max_tokens=4, prompt_len=1, arriving=[living, dying - living])
