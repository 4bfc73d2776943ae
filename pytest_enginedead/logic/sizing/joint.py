"""The step model over depth slices: what each term multiplies in a slice, and the full model's terms.

A step of a model with layers ``L`` costs what does not depend on depth (embedding, LM
head, sampler: ``fixed``, ``per_seq``, ``per_token``) plus, for each layer,

* ``layer_fixed`` per step and ``layer_per_token`` per token, scaled by the layer's weights
  a token passes through (``slices.active_layer_params``: Gemma-4's full layers have wider
  heads than its sliding ones; their experts are the same);
* ``layer_expert`` per expert its tokens reach, in a mixture of experts' MoE layers
  (``terms.Routing``: the expert weights a step reads, which bend with the tokens);
* ``full_context`` per key attended in a full-attention layer and ``window_context`` per
  key attended in a sliding-window layer (every query against every key it sees);
* ``read`` per key read from the KV cache, each sequence's context once, scaled by the bytes
  a key takes in that layer type: one cost per byte read, in full and sliding layers alike.
  A decode reads its whole context for one query, which on a CPU costs far more per key than
  a prefill chunk's keys, all its queries sharing them.  The two layer types' reads are folded
  into one term because the steps cannot tell them apart: past the window a sliding layer reads
  the window whatever the context, as many keys per sequence as ``per_seq`` counts sequences.

Slices differ only in how many layers of each type they keep, so one non-negative fit over
all their steps gives every coefficient, and the full model's terms are those coefficients
at its own layer counts (``full_terms``, linear in them).  When no step's full-attention keys
exceed its windowed keys by 30 % of its context (``separable``), or the steps do not resolve
the window term (``forecast``: past the window its keys are the window times the tokens), the
two context terms are tied by each type's attention work per key (query heads x head size).

Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import floors as floors_
from .slices import Layout, active_layer_params, attention_shape, kv_bytes_per_token, text_config
from .terms import TERMS, Routing, Step, routing_of

JOINT_TERMS = ("fixed", "per_seq", "per_token", "layer_fixed", "layer_per_token", "layer_expert",
               "full_context", "window_context", "read")


@dataclass(frozen=True)
class LayerWeights:
    """Per layer type: its share of the token's work, of a key's attention work, of a key's KV bytes
    (each over the model's mean layer)."""

    token: Mapping[str, float]
    key: Mapping[str, float]
    kv: Mapping[str, float] = field(default_factory=dict)


def layer_weights(config: Mapping[str, Any], lay: Layout) -> LayerWeights:
    """Relative cost of each layer type, from the config (normalised to the model's mean layer)."""
    text = text_config(config)
    params = {t: float(active_layer_params(config, t)) for t in lay.types}
    work = {t: float(attention_shape(text, t)[0] * attention_shape(text, t)[2]) for t in lay.types}
    kv = {t: float(kv_bytes_per_token(config, t)) for t in lay.types}

    def relative(per: Mapping[str, float]) -> dict[str, float]:
        mean = sum(per[t] for t in lay.layer_types) / lay.depth
        return {t: per[t] / mean for t in lay.types}

    return LayerWeights(relative(params), relative(work), relative(kv))


def separable(samples: Sequence[tuple[Step, float]]) -> bool:
    """Whether some step's full-attention keys outnumber its windowed keys enough (30 %) to
    tell the two context terms apart."""
    return any(
        s.window_context_tokens is not None
        and s.context_tokens > 0
        and (s.context_tokens - s.window_context_tokens) / s.context_tokens >= 0.3
        for s, _ in samples
    )


@dataclass(frozen=True)
class LayerCost:
    """Seconds one layer of a type adds: per step, per token, per expert reached, per key attended, per
    key read."""

    fixed_s: float
    per_token_s: float
    per_expert_s: float
    per_context_token_s: float
    per_read_token_s: float


@dataclass(frozen=True)
class JointModel:
    """The step model over slices of one model: its config and full layout, each layer type's weights,
    and whether the two context terms are tied."""

    config: Mapping[str, Any]
    full: Layout
    weights: LayerWeights
    tied: bool = False

    @classmethod
    def of(cls, config: Mapping[str, Any], full: Layout, tied: bool = False) -> JointModel:
        return cls(config, full, layer_weights(config, full), tied)

    def routing(self, lay: Layout | None = None) -> Routing | None:
        """The routing of the model (or of a slice of it, by its depth)."""
        return routing_of(text_config(self.config), (lay or self.full).depth)

    def features(self, step: Step, lay: Layout) -> list[float]:
        """What each joint term multiplies in ``step`` measured on slice ``lay``."""
        w = self.weights
        routing = self.routing(lay)
        experts = 0.0 if routing is None else routing.layers * routing.touched(step.tokens)
        reads = sum(w.kv[t] * (step.window_read if lay.windowed(t) else step.read) for t in lay.layer_types)
        if self.tied:
            attended = sum(w.key[t] * (step.window_context if lay.windowed(t) else step.context_tokens)
                           for t in lay.layer_types)
            context = [attended, 0.0]
        else:
            context = [float(lay.full_layers * step.context_tokens),
                       float(lay.sliding_layers * step.window_context)]
        token_weight = sum(w.token[t] for t in lay.layer_types)
        return [1.0, float(step.seqs), float(step.tokens), float(lay.depth), token_weight * step.tokens,
                experts, *context, reads]

    def _sum(self, per: Mapping[str, float], windowed: bool) -> float:
        return sum(per[t] for t in self.full.layer_types if self.full.windowed(t) == windowed)

    def full_terms(self, c: Mapping[str, float]) -> dict[str, float]:
        """The full model's terms at its layer counts (linear in the joint coefficients)."""
        lay, w = self.full, self.weights
        terms = {
            "fixed": c["fixed"] + c["layer_fixed"] * lay.depth,
            "per_seq": c["per_seq"],
            "per_token": c["per_token"] + c["layer_per_token"] * sum(w.token[t] for t in lay.layer_types),
        }
        if self.routing() is not None:
            terms["per_expert"] = c["layer_expert"]
        count = {t: 1.0 for t in lay.types}
        key = w.key if self.tied else count
        sliding = c["full_context"] if self.tied else c["window_context"]
        if lay.has_full:
            terms["per_context_token"] = c["full_context"] * self._sum(key, False)
            terms["per_read_token"] = c["read"] * self._sum(w.kv, False)
        if lay.has_sliding:
            terms["per_window_context_token"] = sliding * self._sum(key, True)
            terms["per_window_read_token"] = c["read"] * self._sum(w.kv, True)
        return {t: terms[t] for t in TERMS if t in terms}

    def lower(self, rate: floors_.Rates | None) -> list[float]:
        """Each joint term's floor: 0, but the context and read terms' (the shape at this machine's rates)."""
        low = dict.fromkeys(JOINT_TERMS, 0.0)
        if rate is not None:
            low.update(self._floors(rate))
        return [low[t] for t in JOINT_TERMS]

    def _floors(self, rate: floors_.Rates) -> dict[str, float]:
        lay, w = self.full, self.weights
        compute = {t: floors_.compute_floor(self.config, t, rate) for t in lay.types}
        out = {"read": min(floors_.read_floor(self.config, t, rate) / w.kv[t] for t in lay.types)}
        if self.tied:
            out["full_context"] = min(compute[t] / w.key[t] for t in lay.types)
            return out
        for side, windowed in (("full", False), ("window", True)):
            kinds = [t for t in lay.types if lay.windowed(t) == windowed]
            if kinds:
                out[f"{side}_context"] = min(compute[t] for t in kinds)
        return out

    def per_layer(self, c: Mapping[str, float]) -> dict[str, LayerCost]:
        """Seconds a layer of each type adds."""
        w, lay = self.weights, self.full
        out = {}
        for t in lay.types:
            if self.tied:
                context = c["full_context"] * w.key[t]
            else:
                context = c["window_context"] if lay.windowed(t) else c["full_context"]
            out[t] = LayerCost(c["layer_fixed"], c["layer_per_token"] * w.token[t], c["layer_expert"],
                               context, c["read"] * w.kv[t])
        return out

    def floors_at(self, low: Mapping[str, float]) -> dict[str, tuple[float, float]]:
        """Per layer type, the floors its context and read terms were held to: (per key attended, read)."""
        costs = self.per_layer(low)
        return {t: (cost.per_context_token_s, cost.per_read_token_s) for t, cost in costs.items()}
