"""What is checked before any engine starts that needs the installed vLLM (or the machine) to answer:
a factory's engine arguments against vLLM's own lists and parser; the model against the harness's
context and vLLM's model types; the tokenizer a server loads; the batch sizes vLLM builds and this
machine holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_enginedead.compat import in_server, llm_api, registry, versions
from pytest_enginedead.harness.engines.startchecks import (
    batch_problem,
    factory_engine_args,
    model_problem,
    tokenizer_problem,
)
from pytest_enginedead.logic.inputs.arguments import BadMarker
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.machine import meminfo
from tests.support.badinput import KNOWN, config, stand_in_server_parser
from tests.support.sizing import GEMMA_26B


def test_a_factorys_engine_arguments_are_held_against_vllms_own_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Names vLLM does not take fail in one line naming each, with the near misses (the lists
    stand in for the installed vLLM's; the real ones are read in tests/engine/test_compat_vllm.py);
    a vLLM that cannot say lets the names through to its own start."""

    monkeypatch.setattr(llm_api, "engine_argument_names",
                        lambda: frozenset({"max_model_len", "enforce_eager"}))
    monkeypatch.setattr(in_server, "server_parser", stand_in_server_parser)
    factory_engine_args("f", {"max_model_len": 256, "enforce_eager": False}, server=False)
    factory_engine_args("f", {"max_model_len": 256, "enforce_eager": False, "x": None}, server=True)
    with pytest.raises(BadMarker) as info:
        factory_engine_args("vllm_engine_factory", {"no_such_flag": 1, "max_modl_len": 3},
                                    server=False)
    assert str(info.value).startswith("vllm_engine_factory: no_such_flag=1, max_modl_len=3 are not engine "
                                      "arguments of vLLM"), info.value
    assert "did you mean max_model_len?" in str(info.value)
    with pytest.raises(BadMarker, match="no_such_flag=1 becomes --no-such-flag, which the API"):
        factory_engine_args("vllm_server_factory", {"no_such_flag": 1}, server=True)
    with pytest.raises(BadMarker, match="disable_log_stats=False becomes --no-disable-log-stats"):
        factory_engine_args("vllm_server_factory", {"disable_log_stats": False}, server=True)
    monkeypatch.setattr(llm_api, "engine_argument_names", lambda: None)
    monkeypatch.setattr(in_server, "server_parser", lambda: None)
    factory_engine_args("f", {"no_such_flag": 1}, server=False)
    factory_engine_args("f", {"no_such_flag": 1}, server=True)


@pytest.mark.parametrize(("args", "said"), [
    ({"allowed_origins": "http://a"}, "vllm_server_factory: allowed_origins='http://a' becomes "
     "--allowed-origins http://a, which vLLM's server refuses: argument --allowed-origins: invalid loads "
     "value: 'http://a'"),
    ({"max_model_len": True}, "max_model_len=True becomes --max-model-len, which vLLM's server refuses: "
     "argument --max-model-len: expected one argument"),
    ({"max_model_len": False}, "max_model_len=False becomes --max-model-len False, which vLLM's server "
     "refuses: argument --max-model-len: invalid int value: 'False'"),
    ({"seed": [1, 2]}, "seed=[1, 2] becomes --seed [1, 2], which vLLM's server refuses"),
], ids=["origins-not-json", "true-for-a-value", "false-for-a-value", "list-for-one-int"])
def test_server_arguments_vllms_parser_refuses_are_refused_at_the_factory(
    monkeypatch: pytest.MonkeyPatch, args: dict[str, object], said: str
) -> None:
    """Each server argument as the words the server gets, parsed by the server's own parser (its
    stand-in here; vLLM's in tests/engine/test_compat_vllm.py): what it refuses is one line naming
    the argument, its words and the parser's message, before anything starts."""
    monkeypatch.setattr(in_server, "server_parser", stand_in_server_parser)
    with pytest.raises(BadMarker) as info:
        factory_engine_args("vllm_server_factory", args, server=True)
    assert said in str(info.value), info.value
    assert "\n" not in str(info.value)
    accepted = {"allowed_origins": ["http://a"], "enable_prefix_caching": False,
                "hf_overrides": {"num_hidden_layers": 2}, "middleware": ["a.b", "c.d"]}
    factory_engine_args("vllm_server_factory", accepted, server=True)


# --- the model, its tokenizer, the batch sizes -----------------------------------------------------


def _model(tmp_path: Path, tokenizer: str | None = None, **changes: object) -> Path:
    directory = tmp_path / "m"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(config(**changes))
    if tokenizer is not None:
        (directory / "tokenizer.json").write_text(tokenizer)
    return directory


def test_the_model_holds_the_harness_context_and_names_a_known_model_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_position_embeddings`` 16 cannot take the harness's 512 (vLLM's ModelConfig refuses it
    at start; VLLM_ALLOW_LONG_MAX_MODEL_LEN lets it through); a ``model_type`` neither vLLM's nor
    transformers' registry lists is refused, from their sources, with no import of either."""
    monkeypatch.setattr(registry, "known_architectures", lambda: KNOWN)
    monkeypatch.setattr(versions, "vllm_missing_reason", lambda: None)
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    short = _model(tmp_path, max_position_embeddings=16)
    problem = model_problem(str(short), max_model_len=512)
    assert problem == (f"{short}/config.json: the model's context is 16 tokens (vLLM derives it from "
                       "max_position_embeddings and its kin), shorter than the harness's max_model_len 512: "
                       "vLLM refuses a longer max_model_len (unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
    assert "shorter than max_model_len=64" in (model_problem(str(short), max_model_len=64,
                                                             length_given="max_model_len=64") or "")
    assert model_problem(str(short), max_model_len=16) is None
    assert model_problem(str(short)) is None  # no context to hold (calibrate's sizing gives its own)
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert model_problem(str(short), max_model_len=512) is None
    monkeypatch.setattr(registry, "known_model_types", lambda: pytest.fail("the registries were imported"))
    unknown = _model(tmp_path / "u", model_type="nosuchtype")
    problem = model_problem(str(unknown)) or ""
    assert f"""{unknown}/config.json: "model_type": 'nosuchtype' is known to neither vLLM""" in problem
    assert "their config registries" in problem
    assert model_problem(str(_model(tmp_path / "k", model_type="llama"))) is None
    remote = _model(tmp_path / "r", model_type="mine", auto_map={"AutoConfig": "x.C"})
    assert model_problem(str(remote)) is None  # its own code reads it (trust_remote_code)


@pytest.mark.parametrize(("tokenizer", "said"), [
    ('{"version": "1.0", "model": {', "tokenizer.json is not valid JSON: Expecting"),
    ("[1, 2]", "tokenizer.json must hold a JSON object, not list"),
    ("{}", "tokenizer.json: the tokenizers library cannot load it ("),
])
def test_a_tokenizer_a_server_would_load_is_loaded_first(tmp_path: Path, tokenizer: str, said: str) -> None:
    """Beside the model, a tokenizer the API server loads at start: parsed (and loaded with the
    ``tokenizers`` library) before it starts, only for a server; no tokenizer: nothing to load."""
    model = _model(tmp_path, tokenizer=tokenizer)
    problem = model_problem(str(model), architecture=False, server=True) or ""
    assert said in problem and problem.endswith("; vLLM's API server loads it at start"), problem
    assert model_problem(str(model), architecture=False) is None  # an offline engine skips the tokenizer
    assert tokenizer_problem(Path(BUNDLED_MODEL)) is None
    assert tokenizer_problem(tmp_path / "none") is None


def test_a_batch_size_over_what_vllm_builds_or_this_machine_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline engine takes at most vLLM's default max_num_batched_tokens (4096 on CPU), a server
    2048, unless the engine arguments give more (the memory bound: ``test_batchbound.py``); a model
    too large for this machine's memory holds no batch at all, which is no batch size's fault.
    Asked of 10**11 sequences, nothing is allocated per sequence."""
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert batch_problem(BUNDLED_MODEL, 4096, server=False) is None
    assert (batch_problem(BUNDLED_MODEL, 10**11, server=False) or "").startswith(
        "batch size 100000000000 is over 4096, the largest an offline engine takes: vLLM refuses "
        "max_num_seqs above max_num_batched_tokens (4096, vllm.LLM's on CPU default; ")
    served = batch_problem(BUNDLED_MODEL, 2049, server=True) or ""
    assert "is over 2048, the largest a server takes" in served
    assert batch_problem(BUNDLED_MODEL, 5000, False, {"max_num_batched_tokens": 8192}) is None
    assert batch_problem(BUNDLED_MODEL, 5000, False, {"tensor_parallel_size": 2}) is None
    said = batch_problem(BUNDLED_MODEL, 300, True, {"max_num_batched_tokens": 256}, said="batch_size=300")
    assert said == ("batch_size=300 is over 256, the largest a server with max_num_batched_tokens=256 takes: "
                    "vLLM refuses max_num_seqs above max_num_batched_tokens")
    if meminfo("MemAvailable") < 40 * 2**30:  # 26 B parameters, dummy bf16 weights: no batch fits here
        assert batch_problem(str(GEMMA_26B), 8, False) is None  # the model's to say, not the batch size's
