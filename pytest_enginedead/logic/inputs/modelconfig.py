"""A model directory and its ``config.json``: found, parsed, and held against what vLLM needs.

Model presets ship with the package (``pytest_enginedead/models/<name>/``, config only: the
engines run them with dummy weights): a ``--model`` that names one and is no directory here
resolves to it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .values import BadValue, expand_path, path_exists

#: the model presets shipped with the package, one directory each
MODELS_DIR = Path(__file__).parents[2] / "models"
BUNDLED_MODEL = str(MODELS_DIR / "tiny-llama")


def presets() -> dict[str, str]:
    """The model presets by name: directory (a config.json each; dummy weights)."""
    if not MODELS_DIR.is_dir():
        return {}
    return {p.name: str(p) for p in sorted(MODELS_DIR.iterdir()) if (p / "config.json").is_file()}


def model_name(directory: str) -> str:
    """How a command echoes a model: a preset by its name (``gemma-4-26b-a4b``, what the user typed
    and can type again), any other model by its directory."""
    for name, path in presets().items():
        if os.path.realpath(path) == os.path.realpath(directory):
            return name
    return directory


def preset_summary(config: dict[str, Any]) -> str:
    """One line on a preset's config: architecture, depth, width, experts."""
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    parts = [", ".join(config.get("architectures") or ["?"])]
    for key, label in (("num_hidden_layers", "layers"), ("hidden_size", "hidden")):
        if text.get(key):
            parts.append(f"{text[key]} {label}" if label == "layers" else f"{label} {text[key]}")
    experts = text.get("num_experts") or text.get("num_local_experts")
    if experts:
        width = text.get("moe_intermediate_size") or text.get("expert_intermediate_size")
        top = text.get("top_k_experts") or text.get("num_experts_per_tok") or "?"
        parts.append(f"{experts} experts, top-{top}" + (f", expert width {width}" if width else ""))
    if text.get("max_position_embeddings"):
        parts.append(f"context {text['max_position_embeddings']}")
    return "; ".join(parts)


def validate_model(path: str) -> str:
    """A HF-style model directory with a readable ``config.json`` object (resolved).

    The option's parser: cheap enough for every run.  ``model_problem`` does this and
    the rest, once an engine is planned.
    """
    if not path.strip():
        raise BadValue("no model directory given; give a directory holding a config.json")
    p = expand_path(path)
    if not path_exists(p):
        named = presets()
        if path.strip() in named:
            return named[path.strip()]
        hint = f", and no preset is named so ({', '.join(named)})" if os.sep not in path and named else ""
        raise BadValue(f"model directory {str(p)!r} does not exist{hint}")
    if not p.is_dir():
        raise BadValue(f"model path {str(p)!r} is not a directory")
    config = p / "config.json"
    if not config.is_file():
        raise BadValue(f"model directory {str(p)!r} has no config.json")
    config_architectures(read_config(config), config)
    return str(p.resolve())


def read_config(config: Path) -> dict[str, Any]:
    """A model's ``config.json`` as a dict; anything the JSON parser cannot hold is a BadValue."""
    try:
        raw = config.read_bytes()
    except OSError as exc:
        raise BadValue(f"cannot read {config}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadValue(f"{config} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise BadValue(f"{config} nests too deeply for Python's JSON parser") from None
    except ValueError as exc:  # malformed, or a number too long to convert
        raise BadValue(f"{config} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadValue(f"{config} must hold a JSON object, not {type(data).__name__}")
    return data


def config_architectures(data: dict[str, Any], config: Path) -> list[str]:
    archs = data.get("architectures", [])
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise BadValue(f'{config}: "architectures" must be a list of class names')
    return archs


#: config.json keys every engine needs as whole numbers >= 1, where the config gives them
SIZE_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "max_position_embeddings",
)

#: above this a size cannot be a tensor dimension vLLM allocates (int32 indexing)
MAX_SIZE = 2**31 - 1


def config_problem(data: dict[str, Any], config: Path | str, prefix: str = "") -> str | None:
    """Why vLLM could not build a model from this config, in one line, or None.

    Checks what a weightless engine needs before it starts: the sizes are whole
    numbers >= 1, the hidden size splits evenly into attention heads (when no
    ``head_dim`` says otherwise), the query heads into key/value heads.  A nested
    ``text_config`` (multimodal configs) is checked the same way.
    """
    problem = _size_problem(data, config, prefix) or _heads_problem(data, config, prefix)
    if problem:
        return problem
    text = data.get("text_config")
    if isinstance(text, dict) and not prefix:
        return config_problem(text, config, "text_config.")
    return None


def _size_problem(data: dict[str, Any], config: Path | str, prefix: str) -> str | None:
    """The first of ``SIZE_KEYS`` the config gives that is not a whole number from 1 to ``MAX_SIZE``."""
    for key in SIZE_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            return f'{config}: "{prefix}{key}": {value!r} is not a whole number'
        if value < 1:
            return f'{config}: "{prefix}{key}": {value!r} must be at least 1'
        if value > MAX_SIZE:
            return f'{config}: "{prefix}{key}": {value!r} is too large (at most {MAX_SIZE})'
    return None


def _heads_problem(data: dict[str, Any], config: Path | str, prefix: str) -> str | None:
    """Heads that do not split: the hidden size into query heads (no ``head_dim``), those into
    key/value heads."""
    hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
    kv_heads = data.get("num_key_value_heads")
    if data.get("head_dim") is None and hidden is not None and heads is not None and hidden % heads:
        return (
            f'{config}: "{prefix}hidden_size" {hidden} does not split into "{prefix}num_attention_heads" '
            f'{heads} (no "{prefix}head_dim" is given)'
        )
    if heads is not None and kv_heads is not None and heads % kv_heads:
        return (
            f'{config}: "{prefix}num_attention_heads" {heads} is not a multiple of '
            f'"{prefix}num_key_value_heads" {kv_heads}'
        )
    return None


def length_problem(
    data: dict[str, Any], config: Path | str, max_model_len: int | None, given: str
) -> str | None:
    """Why vLLM would refuse to start this model at ``max_model_len`` (``given`` says how it was
    set, for the message), in one line, or None: longer than the context vLLM derives from the
    config (``max_position_embeddings`` and its kin, with RoPE scaling; ``model_max_len``)."""

    if max_model_len is None:
        return None
    longest = model_max_len(data)
    if longest is None or max_model_len <= longest:
        return None
    return (
        f"{config}: the model's context is {longest} tokens (vLLM derives it from max_position_embeddings "
        f"and its kin), shorter than {given}: vLLM refuses a longer max_model_len (unless "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
    )


def model_label(model: str, source: str) -> str:
    """How a message names the run's model: as the user set it, and where."""
    if source == "command line":
        return f"--enginedead-model={model!r}"
    if source == "environment":
        return f"ENGINEDEAD_MODEL={model!r}"
    if source == "bundled":
        return f"the bundled model {model!r}"
    return f"enginedead_model = {model!r}"


#: config.json keys vLLM derives the longest context from (the smallest that is present)
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
#: RoPE types whose ``factor`` vLLM does not apply again (config/model.py)
_SCALED_ROPE = {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}


def model_max_len(config: Mapping[str, object]) -> int | None:
    """The longest ``max_model_len`` vLLM accepts for this config, as it derives it; None if unknown."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, dict)
    found = [v for k in MAX_LEN_KEYS if isinstance(v := text.get(k), int) and not isinstance(v, bool)]
    if not found:
        return None
    return int(min(found) * _rope_factor(text))


def _rope_params(text: Mapping[str, object]) -> list[Mapping[str, Any]]:
    """The config's RoPE parameter sets: one per attention kind where it nests them, else the one."""
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    if not isinstance(rope, dict):
        return []
    if all(isinstance(v, dict) for v in rope.values()):
        return list(rope.values())
    return [rope]


def _rope_factor(text: Mapping[str, object]) -> float:
    """How much RoPE scaling stretches the context, as vLLM applies it: the last ``factor`` of a
    type it does not apply again; 1 for none, and for Gemma 3 (whose scaling vLLM leaves alone)."""
    params = _rope_params(text)
    if not params or "gemma3" in str(text.get("model_type", "")):
        return 1.0
    factor = 1.0
    for p in params:
        kind = p.get("rope_type", p.get("type", "default"))
        if kind not in _SCALED_ROPE and isinstance(p.get("factor"), (int, float)):
            factor = float(p["factor"])
    return factor
