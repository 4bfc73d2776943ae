"""A model directory and its ``config.json``, held against what vLLM needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_enginedead.logic.inputs.modelconfig import (
    BUNDLED_MODEL,
    MODELS_DIR,
    config_problem,
    model_max_len,
    preset_summary,
    presets,
    read_config,
    validate_model,
)
from pytest_enginedead.logic.inputs.values import BadValue


def test_bundled_model_is_valid() -> None:
    """The default model directory passes the same validation as a user's."""
    assert validate_model(BUNDLED_MODEL) == str(Path(BUNDLED_MODEL).resolve())


# --- the presets: configs shipped with the package, taken by name ------------------------------


def test_the_presets_are_the_reported_family_and_the_bundled_model() -> None:
    """Each preset is a directory of the package with a config vLLM can build (dummy weights)."""
    found = presets()
    assert set(found) == {"tiny-llama", "gemma-4-moe-mini", "gemma-4-26b-a4b"}
    for name, directory in found.items():
        assert Path(directory).parent == MODELS_DIR, name
        config = read_config(Path(directory) / "config.json")
        assert config_problem(config, directory) is None, name
    assert found["tiny-llama"] == BUNDLED_MODEL


def test_the_shrunk_moe_serves_text_with_the_bundled_tokenizer() -> None:
    """Its tokenizer files are the tiny Llama's (symlinks in the repository), and they resolve."""
    moe, tiny = Path(presets()["gemma-4-moe-mini"]), Path(BUNDLED_MODEL)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (moe / name).read_bytes() == (tiny / name).read_bytes(), name


@pytest.mark.parametrize("name", ["gemma-4-26b-a4b", "gemma-4-moe-mini", "tiny-llama"])
def test_a_preset_name_resolves_to_its_directory(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no such directory here
    assert validate_model(name) == str(MODELS_DIR / name)
    assert validate_model(f" {name} ") == str(MODELS_DIR / name)


def test_a_directory_by_that_name_wins_over_the_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path that exists is the user's model, whatever its name."""
    mine = tmp_path / "gemma-4-26b-a4b"
    mine.mkdir()
    (mine / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    monkeypatch.chdir(tmp_path)
    assert validate_model("gemma-4-26b-a4b") == str(mine.resolve())
    assert validate_model(str(mine)) == str(mine.resolve())


def test_an_unknown_name_lists_the_presets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadValue) as info:
        validate_model("gemma-4-31b")
    message = str(info.value)
    assert "does not exist, and no preset is named so (" in message
    assert all(name in message for name in presets())


def test_a_missing_path_is_no_preset_question(tmp_path: Path) -> None:
    """A path (it has a separator) that does not exist is a missing directory, not a name."""
    with pytest.raises(BadValue) as info:
        validate_model(str(tmp_path / "gemma-4-26b-a4b"))
    assert "does not exist" in str(info.value) and "preset" not in str(info.value)


def test_a_preset_summary_names_depth_width_experts_and_context() -> None:
    config = read_config(Path(presets()["gemma-4-26b-a4b"]) / "config.json")
    assert preset_summary(config) == (
        "Gemma4ForCausalLM; 30 layers; hidden 2816; 128 experts, top-8, expert width 704; context 262144"
    )
    nested = {"architectures": ["Gemma4ForConditionalGeneration"], "text_config": {"num_hidden_layers": 2}}
    assert preset_summary(nested) == "Gemma4ForConditionalGeneration; 2 layers"
    assert preset_summary({}) == "?"


# --- the longest context: vLLM's derivation, RoPE scaling included -----------------------------


@pytest.mark.parametrize(
    ("config", "longest"),
    [
        ({}, None),
        ({"max_position_embeddings": True}, None),
        ({"n_positions": 2048, "seq_length": 1024}, 1024),  # the smallest key present
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}, 8192),
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, 4096),
        ({"max_position_embeddings": 4096, "rope_scaling": {"factor": "x"}}, 4096),
        ({"max_position_embeddings": 4096, "model_type": "gemma3", "rope_scaling": {"factor": 8.0}}, 4096),
        ({"max_position_embeddings": 4097, "rope_scaling": {"type": "linear", "factor": 1.5}}, 6145),
        # one parameter set per attention kind: the last factor counts
        ({"max_position_embeddings": 4096, "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 2.0},
            "sliding_attention": {"rope_type": "linear", "factor": 3}}}, 12288),
        ({"text_config": {"max_position_embeddings": 8192, "rope_scaling": {"type": "linear", "factor": 2}}},
         16384),
    ],
)
def test_model_max_len_applies_rope_scaling_as_vllm_does(
    config: dict[str, object], longest: int | None
) -> None:
    assert model_max_len(config) == longest
