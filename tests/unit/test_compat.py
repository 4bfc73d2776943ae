"""What compat.py says about vLLM releases, including those that cannot be installed here.

The facts come from each release's source (the deadline's history, the V0 death
classes, the executor CPU engines use); these tests pin them.
"""

from __future__ import annotations

import os
import tempfile
from typing import ClassVar

import pytest

from pytest_enginedead.compat import in_server, in_worker, llm_config, registry, versions


@pytest.mark.parametrize(
    ("version", "stock", "env", "multiprocess"),
    [
        ("0.8.5", 40.0, None, False),  # hard-coded 40 s
        ("0.9.0", 300.0, None, False),  # hard-coded 300 s
        ("0.9.1", 300.0, None, False),
        ("0.9.2", 300.0, versions.DEADLINE_ENV, False),  # the variable appears
        ("0.10.2", 300.0, versions.DEADLINE_ENV, False),
        ("0.19.9", 300.0, versions.DEADLINE_ENV, False),  # CPU: uniprocess, no deadline applies
        ("0.20.0", 300.0, versions.DEADLINE_ENV, True),  # CPU: multiprocess by default
        ("0.27.1", 300.0, versions.DEADLINE_ENV, True),
        ("0.32.0+cpu", 300.0, versions.DEADLINE_ENV, True),
    ],
)
def test_deadline_history(version: str, stock: float, env: str | None, multiprocess: bool) -> None:
    facts = versions.deadline_facts(version)
    assert (facts.stock_s, facts.env_var, facts.multiprocess_on_cpu) == (stock, env, multiprocess)


def test_stock_deadline_reads_the_variable_only_where_it_exists() -> None:
    environ = {versions.DEADLINE_ENV: "45"}
    assert versions.stock_deadline_s(environ, "0.32.0") == 45.0
    assert versions.stock_deadline_s(environ, "0.9.1") == 300.0  # hard-coded there
    assert versions.stock_deadline_s(environ, "0.8.5") == 40.0
    assert versions.stock_deadline_s({}, "0.32.0") == 300.0
    with pytest.raises(ValueError, match="not an integer"):
        versions.stock_deadline_s({versions.DEADLINE_ENV: "2.5"}, "0.32.0")


@pytest.mark.parametrize(("seconds", "env"), [(0.2, "1"), (1.0, "1"), (1.01, "2"), (1240.0, "1240")])
def test_deadline_rounds_up_to_whole_seconds(seconds: float, env: str) -> None:
    """vLLM parses the variable with int(): never shorter than asked, never 0."""
    assert versions.deadline_env_value(seconds) == env


def test_death_classes_per_release() -> None:
    v1 = "vllm.v1.engine.exceptions.EngineDeadError"
    v0 = {
        "vllm.engine.async_llm_engine.AsyncEngineDeadError",
        "vllm.engine.multiprocessing.MQEngineDeadError",
    }
    assert set(versions.death_classes_for("0.10.2")) == {v1, *v0}
    assert versions.death_classes_for("0.11.0") == [v1]
    assert versions.death_classes_for("0.32.0") == [v1]
    assert set(versions.death_classes_for("0.8.0")) == v0  # before V1's class existed


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("vllm.v1.engine.exceptions", "EngineDeadError"),
        ("vllm.engine.async_llm_engine", "AsyncEngineDeadError"),
        ("vllm.engine.multiprocessing", "MQEngineDeadError"),
    ],
)
def test_every_death_class_is_recognised_without_vllm(module: str, name: str) -> None:
    cls = type(name, (RuntimeError,), {"__module__": module})
    sub = type("Sub" + name, (cls,), {"__module__": "elsewhere"})
    assert versions.is_engine_death(cls())
    assert versions.is_engine_death(sub())  # subclasses too, along the MRO
    assert not versions.is_engine_death(type(name, (RuntimeError,), {"__module__": "mine"})())


def test_worker_targets() -> None:
    v1 = ("vllm.v1.worker.worker_base", "WorkerWrapperBase", "execute_model")
    assert in_worker.worker_step_target("0.27.1") == v1
    assert in_worker.worker_step_target("0.32.0") == v1
    assert in_worker.worker_step_target(None) == v1  # unknown: the newest behaviour
    assert in_worker.worker_step_target("0.9.2")[0] == "vllm.worker.worker_base"
    assert in_worker.worker_sample_method("0.32.0") == "sample_tokens"
    assert in_worker.worker_sample_method("0.9.2") is None


def test_batch_size_of_a_step() -> None:
    class V1Step:
        num_scheduled_tokens: ClassVar[dict[str, int]] = {"a": 1, "b": 1, "c": 4}

    class V0Step:
        seq_group_metadata_list: ClassVar[list[object]] = [object(), object()]

    assert in_worker.step_batch_size(V1Step()) == 3
    assert in_worker.step_batch_size(V0Step()) == 2
    assert in_worker.step_batch_size(object()) == 0


def test_engine_arguments() -> None:
    kwargs = llm_config.llm_kwargs("/m", 64, {"max_model_len": 256})
    assert kwargs["load_format"] == "dummy" and kwargs["skip_tokenizer_init"] is True
    assert kwargs["max_num_seqs"] == 64 and kwargs["max_model_len"] == 256
    assert kwargs["enforce_eager"] is True  # no dynamo trace in the first step
    env = llm_config.engine_environment()
    assert env[versions.MULTIPROCESSING_ENV] == "1"  # the deadline exists only there


def test_version_parsing() -> None:
    assert versions.parse_version("0.32.0+cpu") == (0, 32, 0)
    assert versions.as_version("not a version") == versions.NEWEST
    assert versions.as_version(None) == versions.NEWEST
    with pytest.raises(ValueError):
        versions.parse_version("cpu")


def test_engines_never_phone_home() -> None:
    """Every engine and server the harness starts runs with usage statistics off and no hub."""
    from pytest_enginedead.harness.base import EngineBase
    from pytest_enginedead.logic.planning import EngineSpec, Instructions

    env = llm_config.engine_environment()
    assert {k: env[k] for k in ("VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE")} == {
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
    }
    engine = EngineBase(EngineSpec("/m", 8, server=True))
    try:
        started_with = engine.environment(Instructions(2.0, "test"))
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


def test_server_arguments_become_flags() -> None:
    """``max_model_len=256`` → ``--max-model-len 256``; True → the bare flag; False and None add
    nothing, except for a switch the harness turns on, which False turns off again."""
    from pytest_enginedead.harness.server import server_command

    assert in_server.server_flag("max_model_len", 256) == "--max-model-len"
    assert in_server.server_flag("enable_prefix_caching", False) is None
    assert in_server.server_flag("enforce_eager", False) == "--no-enforce-eager"
    cmd = server_command("/m", 1234, 8, "m", (("max_model_len", 256), ("enable_lora", True),
                                              ("enforce_eager", False), ("seed", None)))
    assert cmd[cmd.index("--max-model-len", cmd.index("--max-model-len") + 1) + 1] == "256"
    assert "--enable-lora" in cmd and "--seed" not in cmd
    assert cmd.index("--no-enforce-eager") > cmd.index("--enforce-eager")  # the last one wins


def _kv_cache(spec_kwargs: dict[str, object], version: str | None = "0.32.0",
              monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[dict[str, str], dict[str, int]]:
    from pytest_enginedead.harness.environment import kv_cache
    from pytest_enginedead.logic.modelconfig import BUNDLED_MODEL
    from pytest_enginedead.logic.planning import EngineSpec

    assert monkeypatch is not None
    monkeypatch.setattr(versions, "installed_version", lambda: version)
    spec_kwargs = {"model": BUNDLED_MODEL, "max_num_seqs": 64, **spec_kwargs}
    return kv_cache(EngineSpec(**spec_kwargs))  # type: ignore[arg-type]


def test_the_kv_cache_is_what_the_engines_sequences_can_fill(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine allocates its KV cache at start (1 GiB: ~3 s of a 2-core box's start): the
    harness asks for what max_num_seqs sequences at max_model_len fill, x1.5, at most 1 GiB;
    whatever the user, the spec or an old vLLM says wins."""
    from pytest_enginedead.logic.sizing import slices

    monkeypatch.delenv(llm_config.KV_CACHE_ENV, raising=False)
    mib = 1024**2
    # the bundled model: 2 layers x 4 kv heads x 64 x (k, v) x bf16 = 2 KiB a token
    assert _kv_cache({}, monkeypatch=monkeypatch) == ({}, {llm_config.KV_CACHE_ARG: 64 * 512 * 2048 * 3 // 2})
    assert _kv_cache({"max_num_seqs": 8, "extra_args": (("max_model_len", 256),)},
                     monkeypatch=monkeypatch)[1] == {llm_config.KV_CACHE_ARG: 6 * mib}
    assert _kv_cache({"max_num_seqs": 4096},
                     monkeypatch=monkeypatch)[1] == {llm_config.KV_CACHE_ARG: slices.GIB}
    # given: the spec's GiB, the user's variable, the user's engine argument
    assert _kv_cache({"kv_cache_gib": 3}, monkeypatch=monkeypatch) == ({llm_config.KV_CACHE_ENV: "3"}, {})
    assert _kv_cache({"extra_args": ((llm_config.KV_CACHE_ARG, 1 << 28),)},
                     monkeypatch=monkeypatch) == ({}, {})
    monkeypatch.setenv(llm_config.KV_CACHE_ENV, "2")
    assert _kv_cache({}, monkeypatch=monkeypatch) == ({}, {})
    monkeypatch.delenv(llm_config.KV_CACHE_ENV)
    # a vLLM before the CPU platform took bytes, or a model it cannot be sized for: 1 GiB
    assert _kv_cache({}, version="0.20.0", monkeypatch=monkeypatch) == ({llm_config.KV_CACHE_ENV: "1"}, {})
    assert _kv_cache({"model": "/nonexistent"},
                     monkeypatch=monkeypatch) == ({llm_config.KV_CACHE_ENV: "1"}, {})


def test_a_kv_cache_holds_at_least_one_full_sequence() -> None:
    """vLLM refuses a KV cache that cannot hold one max_model_len sequence: the cap gives way."""
    from pytest_enginedead.logic.sizing import slices

    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
              "head_dim": 64, "hidden_size": 256, "torch_dtype": "bfloat16"}
    assert slices.kv_cache_bytes(config, 1, 1024, cap=1024**2) == 3 * 1024**2  # 2 MiB x 1.5
    assert slices.kv_cache_bytes(config, 1000, 1024) == slices.GIB


REGISTRY = '''
_TEXT_GENERATION_MODELS = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "Gemma4ForCausalLM": ("gemma4", "Gemma4ForCausalLM"),
}
_EMBEDDING_MODELS: dict[str, tuple[str, str]] = {"BertModel": ("bert", "BertModel")}
_PREVIOUSLY_SUPPORTED_MODELS = {"MotifForCausalLM": "0.10.2"}
_VLLM_MODELS = {
    **_TEXT_GENERATION_MODELS,
    **_EMBEDDING_MODELS,
}
'''


def test_the_registry_source_gives_the_architectures_its_union_unpacks() -> None:
    """The in-tree dicts the union unpacks count (an annotated one too); a retired one does not;
    a source without the union lists nothing, so every answer comes from the registry itself."""
    listed = registry.architectures_in_source(REGISTRY)
    assert listed == {"LlamaForCausalLM", "Gemma4ForCausalLM", "BertModel"}
    assert registry.architectures_in_source(REGISTRY.replace("_VLLM_MODELS", "_OTHER")) == frozenset()


def test_an_architecture_the_source_does_not_list_is_asked_of_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def ask_registry() -> frozenset[str]:
        asked.append("registry")
        return frozenset({"LlamaForCausalLM", "PluginForCausalLM"})

    monkeypatch.setattr(registry, "listed_architectures", lambda: frozenset({"LlamaForCausalLM"}))
    monkeypatch.setattr(registry, "known_architectures", ask_registry)
    assert registry.knows_architecture("LlamaForCausalLM") and asked == []
    assert registry.knows_architecture("PluginForCausalLM") and asked == ["registry"]
    assert not registry.knows_architecture("NoSuchModelForCausalLM")
