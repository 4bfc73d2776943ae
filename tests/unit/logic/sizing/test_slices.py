"""A model's layers as sizing sees them: depth slices of its config, and what an engine needs."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_enginedead.logic.sizing import slices
from tests.support.sizing import config_26b


def test_a_kv_cache_holds_at_least_one_full_sequence() -> None:
    """vLLM refuses a KV cache that cannot hold one max_model_len sequence: the cap gives way."""
    from pytest_enginedead.logic.sizing import slices

    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
              "head_dim": 64, "hidden_size": 256, "torch_dtype": "bfloat16"}
    assert slices.kv_cache_bytes(config, 1, 1024, cap=1024**2) == 3 * 1024**2  # 2 MiB x 1.5
    assert slices.kv_cache_bytes(config, 1000, 1024) == slices.GIB


# --- depth slices --------------------------------------------------------------------------------


def test_a_slice_keeps_the_first_layers_of_each_type_and_everything_else() -> None:
    cfg = config_26b()
    one, two = slices.slice_config(cfg, 1), slices.slice_config(cfg, 2)
    assert one["layer_types"] == ["sliding_attention", "full_attention"] and one["num_hidden_layers"] == 2
    assert two["layer_types"] == ["sliding_attention"] * 2 + ["full_attention"] * 2
    for key in (
        "hidden_size",
        "num_experts",
        "top_k_experts",
        "moe_intermediate_size",
        "vocab_size",
        "head_dim",
        "global_head_dim",
        "num_global_key_value_heads",
        "sliding_window",
        "max_position_embeddings",
    ):
        assert one[key] == cfg[key], key
    assert cfg["num_hidden_layers"] == 30  # the original is left alone
    assert slices.slice_indices(slices.layout(cfg), 2) == [0, 1, 5, 11]


def test_the_26b_config_holds_the_public_parameter_counts() -> None:
    """25.2 B parameters, 3.8 B active per token (the model card's figures) from the config alone."""
    cfg = config_26b()
    assert slices.weight_bytes(cfg) / 2 == pytest.approx(25.2e9, rel=0.01)
    lay = slices.layout(cfg)
    active = sum(slices.active_layer_params(cfg, t) for t in lay.layer_types) + 262144 * 2816
    assert active == pytest.approx(3.8e9, rel=0.02)
    assert lay.describe() == "30 layers (25 sliding_attention + 5 full_attention), window 1024"


@pytest.mark.parametrize(
    ("depths", "needle"),
    [
        ((1, 1), "give two different slice depths"),
        (
            (1, 6),
            "slice depth 6 is out of range: a slice keeps the first K layers of each layer type and this "
            "model has 5 full_attention layer(s), so K must be 1..5",
        ),
        ((0, 1), "slice depth 0 is out of range"),
    ],
)
def test_slice_depths_out_of_range(depths: tuple[int, ...], needle: str) -> None:
    assert needle in str(slices.slice_depths_problem(slices.layout(config_26b()), depths))


def test_a_slice_must_be_shallower_than_the_model() -> None:
    lay = slices.Layout(("full_attention",) * 3, None)
    assert "must be shallower" in str(slices.slice_depths_problem(lay, (1, 3)))
    assert slices.slice_depths_problem(lay, (1, 2)) is None


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"hidden_size": 8}, 'has no layers: "num_hidden_layers" is None'),
        ({"num_hidden_layers": 0}, 'has no layers: "num_hidden_layers" is 0'),
        ({"num_hidden_layers": 2, "layer_types": ["full_attention"]}, '"layer_types" names 1 layers'),
    ],
)
def test_a_config_without_layers_cannot_be_sliced(config: dict[str, Any], needle: str) -> None:
    with pytest.raises(slices.SliceError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        slices.layout(config)


def test_memory_per_slice() -> None:
    cfg = config_26b()
    one, two = (slices.memory(slices.slice_config(cfg, k), 1) for k in (1, 2))
    assert one.weights < two.weights < slices.memory(cfg, 1).weights
    per_layer_pair = two.weights - one.weights  # a sliding and a full layer: ~1.5 GB of experts each
    assert per_layer_pair == pytest.approx(2 * 1.55e9 * 2 / 2, rel=0.1)
