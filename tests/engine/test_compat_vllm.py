"""What compat.py asks of the installed vLLM itself (no engine is started)."""

from __future__ import annotations

from pytest_enginedead.compat import in_server, llm_api, llm_config, registry
from pytest_enginedead.harness.preflight import OWNED_ENGINE_ARGS, OWNED_SERVER_ARGS


def test_sampling_is_greedy() -> None:
    """Random sampling compiles a sampler in the first step on 0.27.1-0.31.0."""
    params = llm_api.sampling_params(4)
    assert params.temperature == 0.0 and params.max_tokens == 4 and params.ignore_eos


def test_the_argument_lists_are_vllms_own() -> None:
    """What the factories hold their arguments against is read from the installed vLLM: the
    engine's (EngineArgs and vllm.LLM) and the API server's parser; every argument the harness
    owns or passes is in them, so a refusal names a real vLLM argument, and a made-up one is not."""

    engine = llm_api.engine_argument_names()
    assert engine is not None
    assert {"max_model_len", "enforce_eager", "gpu_memory_utilization", "max_num_batched_tokens"} <= engine
    assert set(llm_config.llm_kwargs("/m", 8)) <= engine
    assert set(OWNED_ENGINE_ARGS) <= engine and "no_such_flag" not in engine
    flags = in_server.server_option_strings()
    assert flags is not None and "--no-such-flag" not in flags
    for key in OWNED_SERVER_ARGS:
        assert in_server.server_flag(key, "x") in flags, key
    for switch in in_server.SERVER_SWITCHES:  # the ones the harness turns on: vLLM takes them and (most) off
        assert in_server.server_flag(switch, True) in flags, switch
    assert in_server.server_flag("enforce_eager", False) in flags
    assert "LlamaForCausalLM" in registry.known_architectures()


def test_the_registry_source_lists_what_the_registry_holds() -> None:
    """The architectures read from the registry's source (no import) are the registry's own
    in-tree ones, and a model check that finds its architecture there imports no torch: a
    process that starts no engine (a server suite's pytest, ``enginedead check``) skips ~9 s."""
    import subprocess
    import sys

    listed = registry.listed_architectures()
    assert {"LlamaForCausalLM", "Gemma4ForCausalLM"} <= listed <= registry.known_architectures()
    probe = ("import sys; from pytest_enginedead.face import options; "
             "assert options.model_problem(options.BUNDLED_MODEL) is None; "
             "print(sorted(m for m in ('torch', 'vllm') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "[]", done.stdout + done.stderr[-2000:]
