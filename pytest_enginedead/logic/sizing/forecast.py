"""From depth slices to the full model: one fit over every slice's steps, read at full depth.

A step of a model with layers ``L`` costs what does not depend on depth (embedding,
LM head, sampler: ``fixed``, ``per_seq``, ``per_token``) plus, for each layer,

* ``layer_fixed`` per step and ``layer_per_token`` per token, scaled by the layer's
  weights a token passes through (``slices.active_layer_params``: Gemma-4's full
  layers have wider heads than its sliding ones; their experts are the same);
* ``full_context`` per key attended in a full-attention layer and
  ``window_context`` per key attended in a sliding-window layer (the attention work:
  every query against every key it sees);
* ``full_read`` / ``window_read`` per key read from the KV cache, each sequence's
  context once (a decode reads its whole context for one query: on a CPU that costs
  far more per key than a prefill chunk's keys, which all its queries share).

Measured slices differ only in how many layers of each type they keep, so one
non-negative fit over all their steps gives every term; the full model's ``Fit`` is
those terms at its own layer counts.  When the steps cannot tell the two layer types'
context terms apart (no step whose full-attention keys exceed its windowed keys by
30 % of its context, i.e. every context under about 1.4x the window: ``separable``),
they are tied by the attention work a key costs in each layer type (query heads x head
size) and the KV bytes it takes, and the forecast says so.

No context term falls below what the model's shape implies at this machine's measured
rates (``floors``): a term the steps cannot resolve is held there, not at 0.  The fit's
uncertainty (a bootstrap, ``solve``) travels with it: every forecast has an interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from . import floors as floors_
from . import solve
from .fit import Fit, FitError, Step, Uncertainty, group_steps, step_spread
from .slices import Layout, active_layer_params, attention_shape, kv_bytes_per_token, text_config

JOINT_TERMS = (
    "fixed",
    "per_seq",
    "per_token",
    "layer_fixed",
    "layer_per_token",
    "full_context",
    "window_context",
    "full_read",
    "window_read",
)
#: the full model's terms, in their order
FULL_TERMS = ("fixed", "per_seq", "per_token", "per_context_token", "per_window_context_token",
              "per_read_token", "per_window_read_token")
#: passes of fit -> this machine's rates -> floors -> fit
FLOOR_PASSES = 3


@dataclass(frozen=True)
class LayerWeights:
    """Per layer type: its share of the token's work, of a key's attention work, of a key's KV bytes."""

    token: Mapping[str, float]
    key: Mapping[str, float]
    kv: Mapping[str, float] = field(default_factory=dict)


def layer_weights(config: Mapping[str, Any], lay: Layout) -> LayerWeights:
    """Relative cost of each layer type, from the config (normalised to the model's mean layer)."""
    text = text_config(config)
    params = {t: float(active_layer_params(config, t)) for t in lay.types}
    mean = sum(params[t] for t in lay.layer_types) / lay.depth
    work, kv = {}, {}
    for t in lay.types:
        heads, _, head = attention_shape(text, t)
        work[t] = float(heads * head)
        kv[t] = float(kv_bytes_per_token(config, t))
    mean_work = sum(work[t] for t in lay.layer_types) / lay.depth
    mean_kv = sum(kv[t] for t in lay.layer_types) / lay.depth
    return LayerWeights({t: params[t] / mean for t in lay.types}, {t: work[t] / mean_work for t in lay.types},
                        {t: kv[t] / mean_kv for t in lay.types})


def _kv(w: LayerWeights, t: str) -> float:
    return w.kv.get(t, w.key[t])


def _features(step: Step, lay: Layout, w: LayerWeights, tied: bool) -> list[float]:
    token_weight = sum(w.token[t] for t in lay.layer_types)
    window = step.context_tokens if step.window_context_tokens is None else step.window_context_tokens
    if tied:
        attention = sum(
            w.key[t] * (window if lay.windowed(t) else step.context_tokens) for t in lay.layer_types
        )
        reads = sum(_kv(w, t) * (step.window_read if lay.windowed(t) else step.read) for t in lay.layer_types)
        return [1.0, step.seqs, step.tokens, lay.depth, token_weight * step.tokens, attention, 0.0, reads,
                0.0]
    return [
        1.0,
        step.seqs,
        step.tokens,
        lay.depth,
        token_weight * step.tokens,
        lay.full_layers * step.context_tokens,
        lay.sliding_layers * window,
        lay.full_layers * step.read,
        lay.sliding_layers * step.window_read,
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
    #: per joint term, the least it may be (the shape's floor at this machine's rates; 0 elsewhere)
    lower: Mapping[str, float] = field(default_factory=dict)
    rates: floors_.Rates | None = None

    def _context(self, lay: Layout, t: str, kind: str) -> float:
        c = self.coefficients
        if self.tied:
            return c[f"full_{kind}"] * (self.weights.key[t] if kind == "context" else _kv(self.weights, t))
        return c[f"window_{kind}"] if lay.windowed(t) else c[f"full_{kind}"]

    def per_layer(self, lay: Layout) -> dict[str, dict[str, float]]:
        """Seconds a layer of each type adds: per step, per token, per key attended, per key read."""
        c = self.coefficients
        return {t: {
            "fixed_s": c["layer_fixed"],
            "per_token_s": c["layer_per_token"] * self.weights.token[t],
            "per_context_token_s": self._context(lay, t, "context"),
            "per_read_token_s": self._context(lay, t, "read"),
        } for t in lay.types}

    def floors_at(self, lay: Layout) -> dict[str, dict[str, float]]:
        """Per layer type, the floors its context terms were held to."""
        low = self.lower
        out = {}
        for t in lay.types:
            if self.tied:
                ctx = low.get("full_context", 0.0) * self.weights.key[t]
                read = low.get("full_read", 0.0) * _kv(self.weights, t)
            else:
                side = "window" if lay.windowed(t) else "full"
                ctx, read = low.get(f"{side}_context", 0.0), low.get(f"{side}_read", 0.0)
            out[t] = {"per_context_token_s": ctx, "per_read_token_s": read}
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
            "floors": self.floors_at(lay),
            "rates": None if self.rates is None else self.rates.as_dict(),
            "context_terms_tied": self.tied,
        }


def _lower(config: Mapping[str, Any], full: Layout, w: LayerWeights, rate: floors_.Rates | None,
           tied: bool) -> list[float]:
    """Each joint term's floor: 0, but the context terms' (the shape at this machine's rates)."""
    low = dict.fromkeys(JOINT_TERMS, 0.0)
    if rate is None:
        return [low[t] for t in JOINT_TERMS]
    compute = {t: floors_.compute_floor(config, t, rate) for t in full.types}
    memory = {t: floors_.read_floor(config, t, rate) for t in full.types}
    if tied:
        low["full_context"] = min(compute[t] / w.key[t] for t in full.types)
        low["full_read"] = min(memory[t] / _kv(w, t) for t in full.types)
    else:
        for side, kinds in (("full", [t for t in full.types if not full.windowed(t)]),
                            ("window", [t for t in full.types if full.windowed(t)])):
            if kinds:
                low[f"{side}_context"] = min(compute[t] for t in kinds)
                low[f"{side}_read"] = min(memory[t] for t in kinds)
    return [low[t] for t in JOINT_TERMS]


def _fit_rows(rows: list[list[float]], times: list[float], lower: list[float]) -> dict[str, float]:
    scaled = [[x / t for x in row] for row, t in zip(rows, times, strict=True)]
    try:
        coef = solve.nnls(scaled, [1.0] * len(scaled), lower)
    except solve.SolveError:
        raise FitError(f"no fit of the step model to {len(rows)} groups of steps") from None
    return dict(zip(JOINT_TERMS, coef, strict=True))


def fit_slices(
    slices: Sequence[tuple[Layout, Sequence[tuple[Step, float]]]],
    full: Layout,
    config: Mapping[str, Any],
    origin: str | None = None,
    floors: bool = True,
) -> Forecast:
    """One fit over the steps of every slice (each with its layout); the full model's terms.

    With one "slice" that is the model itself, this is the model's own fit (the depth
    terms then fold into the others).  ``floors``: hold the context terms at or above the
    shape's floors at this machine's measured rates.
    """
    weights = layer_weights(config, full)
    pooled = [x for _, samples in slices for x in samples]
    grouped = [(shape, t, lay) for lay, samples in slices for shape, t, _ in group_steps(samples)]
    if not grouped:
        raise FitError("no finished step with a positive time to fit")
    times = [t for _, t, _ in grouped]
    # the layer types' context terms apart when the steps can tell them apart; where one falls, the
    # floors hold it (tying them then let noise decide both: the 2026-12-04 forecast's every term 0)
    tied = full.has_full and full.has_sliding and not separable(pooled)
    rows = [_features(shape, lay, weights, tied) for shape, _, lay in grouped]
    lower = [0.0] * len(JOINT_TERMS)
    rate = None
    coef = _fit_rows(rows, times, lower)
    for _ in range(FLOOR_PASSES if floors else 0):
        rate = floors_.rates(config, full, _full_terms(coef, full, weights, tied))
        lower = _lower(config, full, weights, rate, tied)
        coef = _fit_rows(rows, times, lower)
    if tied:  # one attention term (and one read term), split by each type's work (bytes) per key
        coef["window_context"] = coef["window_read"] = 0.0
    worst, at, at_predicted = 0.0, grouped[0], 0.0
    for row, (shape, t, lay) in zip(rows, grouped, strict=True):
        predicted = sum(c * x for c, x in zip(coef.values(), row, strict=True))
        residual = abs(predicted - t) / t
        if residual >= worst:
            worst, at, at_predicted = residual, (shape, t, lay), predicted
    terms = _full_terms(coef, full, weights, tied)
    scaled = [[x / t for x in row] for row, t in zip(rows, times, strict=True)]
    cov = solve.bootstrap_covariance(scaled, [coef[t] for t in JOINT_TERMS], lower)
    names = tuple(terms)
    matrix = [[_full_terms(_unit(j), full, weights, tied)[n] for j in JOINT_TERMS] for n in names]
    full_cov = tuple(tuple(r) for r in solve.transform(cov, matrix))
    uncertainty = Uncertainty(names, full_cov, step_spread(*(samples for _, samples in slices)))
    on_slice = at[2] != full
    fit = Fit(
        terms,
        worst,
        at[0],
        at[1],
        worst_measured_on=f"a slice of {at[2].describe()}" if on_slice else None,
        worst_predicted_s=at_predicted if on_slice else None,
        groups=len(grouped),
        steps=len(pooled),
        origin=origin or f"forecast to {full.depth} layers from {len(slices)} slices",
        points=tuple((shape, t) for shape, t, lay in grouped if lay == full),
    )
    return Forecast(replace(fit, uncertainty=uncertainty), coef, tied, weights,
                    dict(zip(JOINT_TERMS, lower, strict=True)), rate)


def _unit(term: str) -> dict[str, float]:
    return {t: 1.0 if t == term else 0.0 for t in JOINT_TERMS}


def _full_terms(c: Mapping[str, float], lay: Layout, w: LayerWeights, tied: bool) -> dict[str, float]:
    """The full model's terms at its layer counts (linear in the joint coefficients)."""
    full_layers = [t for t in lay.layer_types if not lay.windowed(t)]
    sliding_layers = [t for t in lay.layer_types if lay.windowed(t)]
    terms = {
        "fixed": c["fixed"] + c["layer_fixed"] * lay.depth,
        "per_seq": c["per_seq"],
        "per_token": c["per_token"] + c["layer_per_token"] * sum(w.token[t] for t in lay.layer_types),
    }
    for kind, name, window_name in (("context", "per_context_token", "per_window_context_token"),
                                    ("read", "per_read_token", "per_window_read_token")):
        weight = w.key if kind == "context" else {t: _kv(w, t) for t in lay.types}
        if full_layers:
            layers = sum(weight[t] for t in full_layers) if tied else len(full_layers)
            terms[name] = c[f"full_{kind}"] * layers
        if sliding_layers:
            terms[window_name] = (
                c[f"full_{kind}"] * sum(weight[t] for t in sliding_layers)
                if tied
                else c[f"window_{kind}"] * len(sliding_layers)
            )
    return {t: terms[t] for t in FULL_TERMS if t in terms}
