"""How the harness configures a vLLM engine in every release: its arguments and its environment."""

from __future__ import annotations

import os
import tempfile

from pytest_enginedead.compat import llm_config
from pytest_enginedead.logic import releases


def test_engine_arguments() -> None:
    kwargs = llm_config.llm_kwargs("/m", 64, {"max_model_len": 256})
    assert kwargs["load_format"] == "dummy" and kwargs["skip_tokenizer_init"] is True
    assert kwargs["max_num_seqs"] == 64 and kwargs["max_model_len"] == 256
    assert kwargs["enforce_eager"] is True  # no dynamo trace in the first step
    env = llm_config.engine_environment()
    assert env[releases.MULTIPROCESSING_ENV] == "1"  # the deadline exists only there


def test_engines_never_phone_home() -> None:
    """Every engine and server the harness starts runs with usage statistics off and no hub."""
    from pytest_enginedead.harness.engines.base import EngineBase
    from pytest_enginedead.logic.planning.engines import DeadlineAndFaults, EngineSpec

    env = llm_config.engine_environment()
    assert {k: env[k] for k in ("VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE")} == {
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
    }
    engine = EngineBase(EngineSpec("/m", 8, server=True))
    try:
        started_with = engine.environment(DeadlineAndFaults(2.0, "test"))
    finally:
        engine.stop()
    assert started_with["VLLM_NO_USAGE_STATS"] == "1" and started_with["HF_HUB_OFFLINE"] == "1"
    # vLLM's ipc:// sockets and temp files, left in the temp dir by every engine otherwise,
    # go with the run dir
    assert started_with[llm_config.RPC_BASE_ENV] == engine.run_dir == started_with["TMPDIR"]


def test_scratch_environment_keeps_the_compile_cache_and_short_socket_paths() -> None:
    """The engine's temp dir moves into the directory given; torch's compile cache stays
    where the caller's environment has it; sockets stay out of a path too long for them."""
    short = "/tmp/enginedead-abc"
    env = llm_config.scratch_environment(short, {})
    assert env["TMPDIR"] == env[llm_config.RPC_BASE_ENV] == short
    inductor = env[llm_config.INDUCTOR_CACHE_ENV]
    assert inductor.startswith(os.path.join(tempfile.gettempdir(), "torchinductor_"))
    mine = {llm_config.INDUCTOR_CACHE_ENV: "/cache/inductor", llm_config.RPC_BASE_ENV: "/run/ipc"}
    long = "/" + "d" * llm_config.RPC_BASE_MAX_LEN
    env = llm_config.scratch_environment(long, mine)
    assert env["TMPDIR"] == long
    assert env[llm_config.INDUCTOR_CACHE_ENV] == "/cache/inductor"
    assert env[llm_config.RPC_BASE_ENV] == "/run/ipc"  # the caller's, not the too-long one
    assert llm_config.scratch_environment(long, {})[llm_config.RPC_BASE_ENV] == tempfile.gettempdir()
