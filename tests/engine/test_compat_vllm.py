"""What compat.py asks of the installed vLLM itself (no engine is started)."""

from __future__ import annotations

from pytest_enginedead.compat import in_server, llm_api, llm_config, registry
from pytest_enginedead.harness.engines.startchecks import OWNED_ENGINE_ARGS, OWNED_SERVER_ARGS


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
    probe = ("import sys; from pytest_enginedead.harness.engines.startchecks import model_problem; "
             "from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL; "
             "assert model_problem(BUNDLED_MODEL) is None; "
             "print(sorted(m for m in ('torch', 'vllm') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "[]", done.stdout + done.stderr[-2000:]


def test_server_arguments_as_the_servers_own_parser_reads_them() -> None:
    """The installed API server's parser (imported): ``False`` is ``--no-X`` for its boolean flags
    (the flag was dropped before), dicts and lists are the JSON it reads (Python's repr was refused
    ~8 s into the start), what it refuses is said in its own words, and the harness's whole command
    line for a server with such arguments parses."""
    from pytest_enginedead.harness.engines.server import server_command
    from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL

    assert in_server.server_flag("enable_prefix_caching", False) == "--no-enable-prefix-caching"
    args = (("enable_prefix_caching", False), ("hf_overrides", {"num_hidden_layers": 2}),
            ("allowed_origins", ["http://a"]))
    for key, value in args:
        assert in_server.server_args_problem(in_server.server_tokens(key, value)) is None, key
    said = in_server.server_args_problem(in_server.server_tokens("allowed_origins", "http://a"))
    assert said == "argument --allowed-origins: invalid loads value: 'http://a'"
    cmd = server_command(BUNDLED_MODEL, 8000, 2, "m", args)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert in_server.server_args_problem(cmd[3:]) is None
    assert "--no-enable-prefix-caching" in cmd and '{"num_hidden_layers": 2}' in cmd


def test_the_config_sources_list_what_the_config_registries_hold() -> None:
    """The model types read from vLLM's and transformers' sources (no import) are exactly what their
    registries hold once imported: the model check asks the sources alone."""
    assert registry.listed_model_types() == registry.known_model_types()
    assert "llama" in registry.listed_model_types()
