"""The guard suite's engine, asked wrongly: each bad argument fails its test at once, in one
line, and the shared engine serves the suite's other tests all the same; a guard the engine
core cannot run fails its test instead of running the engine unguarded."""

import json

import pytest

pytestmark = [pytest.mark.enginedead_batch_sizes(64), pytest.mark.enginedead_guard(hang_s=3)]

BAD_GENERATE = {
    "arriving-negative": {"arriving": -1},  # looped forever
    "prompt-len-zero": {"prompt_len": 0},  # a traceback from inside the harness
    "n-zero": {"n": 0},
    "past-max-model-len": {"prompt_len": 4, "max_tokens": 600},
}


@pytest.mark.parametrize("kwargs", list(BAD_GENERATE.values()), ids=list(BAD_GENERATE))
def test_bad_generate_argument(vllm_engine, kwargs):
    vllm_engine.generate(**kwargs)


BAD_FACTORY = {
    "server-port": ("vllm_server_factory", {"port": 18123}),  # waited for pytest-timeout
    "engine-unknown-argument": ("vllm_engine_factory", {"no_such_flag": 1}),
    "server-unknown-argument": ("vllm_server_factory", {"no_such_flag": 1}),
    "engine-unknown-architecture": ("vllm_engine_factory", {"model": "unknown-arch"}),
}


@pytest.mark.parametrize(("factory", "kwargs"), list(BAD_FACTORY.values()), ids=list(BAD_FACTORY))
def test_bad_factory_argument_beside_the_shared_engine(vllm_engine, request, tmp_path, factory, kwargs):
    """Called while the shared engine is held: a factory start would first stop it."""
    if kwargs.get("model") == "unknown-arch":
        (tmp_path / "unknown-arch").mkdir()
        config = {"architectures": ["NoSuchModelForCausalLM"], "model_type": "llama", "vocab_size": 1000}
        (tmp_path / "unknown-arch" / "config.json").write_text(json.dumps(config))
        kwargs = {"model": str(tmp_path / "unknown-arch")}
    request.getfixturevalue(factory)(2, **kwargs)


@pytest.mark.enginedead_guard(hang_s=3, policy="edhidden:cap")
def test_a_guard_policy_the_engine_core_cannot_import(vllm_engine):
    raise AssertionError("never runs: the engine core refused the guard")
