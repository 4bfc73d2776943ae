"""No injection: the model's own compute outlives a short deadline (run it with
``--enginedead-model=fixtures/heavy-llama``).

A step of n one-token sequences costs what a decode step of n does.  The sizes
(``ENGINEDEAD_EXAMPLE_SIZES``: the deadline, the batch that lives, the batch that dies)
come from decode steps measured on the machine that runs it (tests/engine/test_engine.py);
the defaults are the 2-core box the suite was written on.
"""

import json
import os

import pytest

from pytest_enginedead import assert_no_false_death

SIZES = json.loads(os.environ.get("ENGINEDEAD_EXAMPLE_SIZES", '{"deadline": 1, "living": 2, "dying": 64}'))


@pytest.mark.enginedead_batch_sizes(SIZES["living"], SIZES["dying"])
@pytest.mark.enginedead_timeout(SIZES["deadline"])
def test_real_compute(vllm_engine):
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=4, prompt_len=1)
