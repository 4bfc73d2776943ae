"""The least a key attended can cost, from the model's shape and this machine's measured rates.

A query attending one key in a layer does ``2 x heads x head_size`` multiply-adds (its
score against the key, then the value's share of its output), and a decode reads that
key's K and V from the cache (``kv_bytes_per_token``).  The same run measured how fast
this machine does the model's own work:

* multiply-adds per second: the weights a token passes through in every layer
  (``active_layer_params``) over the fitted ``per_token`` term;
* bytes per second: the weights a one-sequence decode step reads (every layer's active
  weights and the LM head) over that step's fitted time.

A key cannot cost less than the larger of the two at those rates (attention kernels do
not beat the GEMMs the weights run on), so a context term that the steps cannot
resolve is held at that floor instead of falling to 0.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .slices import Layout, active_layer_params, attention_shape, dtype_bytes, kv_bytes_per_token, text_config


@dataclass(frozen=True)
class Rates:
    """What this machine did per second, measured: the model's multiply-adds, and weight bytes read."""

    macs_per_s: float
    bytes_per_s: float

    def as_dict(self) -> dict[str, float]:
        return {"macs_per_s": self.macs_per_s, "bytes_per_s": self.bytes_per_s}


def attention_macs(config: Mapping[str, Any], kind: str) -> int:
    """Multiply-adds one query spends on one key in a layer of this kind."""
    heads, _, head = attention_shape(text_config(config), kind)
    return 2 * heads * head


def token_macs(config: Mapping[str, Any], lay: Layout) -> int:
    """Multiply-adds one token spends in the layers (the weights it passes through)."""
    return sum(active_layer_params(config, t) for t in lay.layer_types)


def decode_bytes(config: Mapping[str, Any], lay: Layout) -> int:
    """Weight bytes a one-sequence decode step reads: every layer's active weights and the LM head."""
    text = text_config(config)
    hidden, vocab = int(text.get("hidden_size") or 1), int(text.get("vocab_size") or 1)
    return (token_macs(config, lay) + hidden * vocab) * dtype_bytes(config)


def rates(config: Mapping[str, Any], lay: Layout, terms: Mapping[str, float]) -> Rates | None:
    """This machine's rates from the full model's fitted terms; None when the fit has no token term."""
    per_token = terms.get("per_token", 0.0)
    one = terms.get("fixed", 0.0) + terms.get("per_seq", 0.0) + per_token
    if per_token <= 0 or one <= 0:
        return None
    return Rates(token_macs(config, lay) / per_token, decode_bytes(config, lay) / one)


def key_floor(config: Mapping[str, Any], kind: str, rate: Rates) -> float:
    """Seconds one key attended costs at least, in one layer of this kind."""
    compute = attention_macs(config, kind) / rate.macs_per_s
    memory = kv_bytes_per_token(config, kind) / rate.bytes_per_s
    return max(compute, memory)


def floors(config: Mapping[str, Any], lay: Layout, rate: Rates | None) -> dict[str, float]:
    """Per layer type, the least a key attended costs in one layer (0 where no rate was measured)."""
    return {t: 0.0 if rate is None else key_floor(config, t, rate) for t in lay.types}
