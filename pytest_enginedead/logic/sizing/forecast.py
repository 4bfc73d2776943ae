"""From depth slices to the full model: one fit over every slice's steps, read at full depth.

A step of a model with layers ``L`` costs what does not depend on depth (embedding,
LM head, sampler: ``fixed``, ``per_seq``, ``per_token``) plus, for each layer,

* ``layer_fixed`` per step and ``layer_per_token`` per token, scaled by the layer's
  weights a token passes through (``slices.active_layer_params``: Gemma-4's full
  layers have wider heads than its sliding ones; their experts are the same);
* ``full_context`` per key attended in a full-attention layer and
  ``window_context`` per key attended in a sliding-window layer.

Measured slices differ only in how many layers of each type they keep, so one
non-negative fit over all their steps gives every term; the full model's ``Fit`` is
those terms at its own layer counts.  When the steps cannot tell the two context
terms apart (contexts short of twice the window) or the fit drops one the model's
layers need, they are tied by the attention work a key costs in each layer type
(query heads x head size), and the forecast says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .fit import Fit, FitError, Step, group_steps, nnls_relative
from .slices import Layout, active_layer_params, attention_shape, text_config

JOINT_TERMS = (
    "fixed",
    "per_seq",
    "per_token",
    "layer_fixed",
    "layer_per_token",
    "full_context",
    "window_context",
)


@dataclass(frozen=True)
class LayerWeights:
    """Per layer type: its share of the token's work, and of a key's attention work."""

    token: Mapping[str, float]
    key: Mapping[str, float]


def layer_weights(config: Mapping[str, Any], lay: Layout) -> LayerWeights:
    """Relative cost of each layer type, from the config (normalised to the model's mean layer)."""
    text = text_config(config)
    params = {t: float(active_layer_params(config, t)) for t in lay.types}
    mean = sum(params[t] for t in lay.layer_types) / lay.depth
    work = {}
    for t in lay.types:
        heads, _, head = attention_shape(text, t)
        work[t] = float(heads * head)
    mean_work = sum(work[t] for t in lay.layer_types) / lay.depth
    return LayerWeights({t: params[t] / mean for t in lay.types}, {t: work[t] / mean_work for t in lay.types})


def _features(step: Step, lay: Layout, w: LayerWeights, tied: bool) -> list[float]:
    token_weight = sum(w.token[t] for t in lay.layer_types)
    window = step.context_tokens if step.window_context_tokens is None else step.window_context_tokens
    if tied:
        attention = sum(
            w.key[t] * (window if lay.windowed(t) else step.context_tokens) for t in lay.layer_types
        )
        return [1.0, step.seqs, step.tokens, lay.depth, token_weight * step.tokens, attention, 0.0]
    return [
        1.0,
        step.seqs,
        step.tokens,
        lay.depth,
        token_weight * step.tokens,
        lay.full_layers * step.context_tokens,
        lay.sliding_layers * window,
    ]


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
class Forecast:
    """The full model's fit, the per-layer costs behind it, and how well they fit the slices."""

    fit: Fit
    coefficients: Mapping[str, float]
    tied: bool
    weights: LayerWeights

    def per_layer(self, lay: Layout) -> dict[str, dict[str, float]]:
        """Seconds a layer of each type adds: per step, per token, per context token."""
        c = self.coefficients
        out = {}
        for t in lay.types:
            if self.tied:
                ctx = c["full_context"] * self.weights.key[t]
            else:
                ctx = c["window_context"] if lay.windowed(t) else c["full_context"]
            out[t] = {
                "fixed_s": c["layer_fixed"],
                "per_token_s": c["layer_per_token"] * self.weights.token[t],
                "per_context_token_s": ctx,
            }
        return out

    def as_dict(self, lay: Layout) -> dict[str, Any]:
        c = self.coefficients
        return {
            "depth_independent": {
                "fixed_s": c["fixed"],
                "per_seq_s": c["per_seq"],
                "per_token_s": c["per_token"],
            },
            "per_layer": self.per_layer(lay),
            "context_terms_tied": self.tied,
        }


def fit_slices(
    slices: Sequence[tuple[Layout, Sequence[tuple[Step, float]]]],
    full: Layout,
    config: Mapping[str, Any],
    origin: str | None = None,
) -> Forecast:
    """One fit over the steps of every slice (each with its layout); the full model's terms.

    With one "slice" that is the model itself, this is the model's own fit (the depth
    terms then fold into the others).
    """
    weights = layer_weights(config, full)
    pooled = [x for _, samples in slices for x in samples]
    grouped = [(shape, t, lay) for lay, samples in slices for shape, t, _ in group_steps(samples)]
    if not grouped:
        raise FitError("no finished step with a positive time to fit")
    both = full.has_full and full.has_sliding
    attempts = ([False, True] if separable(pooled) else [True]) if both else [False]
    for tied in attempts:
        rows = [_features(shape, lay, weights, tied) for shape, _, lay in grouped]
        coef = dict(zip(JOINT_TERMS, nnls_relative(rows, [t for _, t, _ in grouped]), strict=True))
        dropped = (full.has_full and coef["full_context"] <= 0) or (
            not tied and full.has_sliding and coef["window_context"] <= 0
        )
        if not dropped:
            break
    if tied:  # one attention term, split by each type's work per key
        coef["window_context"] = 0.0
    worst, at = 0.0, grouped[0]
    for row, (shape, t, lay) in zip(rows, grouped, strict=True):
        residual = abs(sum(c * x for c, x in zip(coef.values(), row, strict=True)) - t) / t
        if residual >= worst:
            worst, at = residual, (shape, t, lay)
    terms = _full_terms(coef, full, weights, tied)
    fit = Fit(
        terms,
        worst,
        at[0],
        at[1],
        groups=len(grouped),
        steps=len(pooled),
        origin=origin or f"forecast to {full.depth} layers from {len(slices)} slices",
        points=tuple((shape, t) for shape, t, lay in grouped if lay == full),
    )
    return Forecast(fit, coef, tied, weights)


def _full_terms(c: Mapping[str, float], lay: Layout, w: LayerWeights, tied: bool) -> dict[str, float]:
    full_layers = [t for t in lay.layer_types if not lay.windowed(t)]
    sliding_layers = [t for t in lay.layer_types if lay.windowed(t)]
    terms = {
        "fixed": c["fixed"] + c["layer_fixed"] * lay.depth,
        "per_seq": c["per_seq"],
        "per_token": c["per_token"] + c["layer_per_token"] * sum(w.token[t] for t in lay.layer_types),
    }
    if full_layers:
        terms["per_context_token"] = c["full_context"] * (
            sum(w.key[t] for t in full_layers) if tied else len(full_layers)
        )
    if sliding_layers:
        terms["per_window_context_token"] = (
            c["full_context"] * sum(w.key[t] for t in sliding_layers)
            if tied
            else c["window_context"] * len(sliding_layers)
        )
    return terms
