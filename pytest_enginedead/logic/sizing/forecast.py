"""From depth slices to the full model: one fit over every slice's steps, read at full depth.

The joint model (``joint.py``) says what each term multiplies in a slice's step; one
non-negative fit over all the slices' steps gives its coefficients, and the full model's
``Fit`` is those coefficients at the model's own layer counts.  With one "slice" that is the
model itself it is the model's own fit (the depth terms then fold into the others).

No context or read term falls below what the model's shape implies at this machine's
measured rates (``floors``): a term the steps cannot resolve is held there, not at 0.  The
fit's uncertainty (a bootstrap, ``solve``; the spread of repeated steps; the misfit left on
the slices' groups) travels with it: every forecast has an interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from . import floors as floors_
from . import solve
from .fit import Fit, FitError, Residual, Uncertainty, group_steps, misfit, step_spread
from .joint import JOINT_TERMS, JointModel, LayerCost, layer_weights, separable
from .slices import Layout
from .terms import Step

__all__ = ["FLOOR_PASSES", "JOINT_TERMS", "Forecast", "fit_slices", "layer_weights"]

#: passes of fit -> this machine's rates -> floors -> fit
FLOOR_PASSES = 3

Sliced = Sequence[tuple[Layout, Sequence[tuple[Step, float]]]]


@dataclass(frozen=True)
class Forecast:
    """The full model's fit, the per-layer costs behind it, and the floors its terms were held to."""

    fit: Fit
    coefficients: Mapping[str, float]
    model: JointModel
    #: per joint term, the least it may be (the shape's floor at this machine's rates; 0 elsewhere)
    lower: Mapping[str, float] = field(default_factory=dict)
    rates: floors_.Rates | None = None
    #: where the fit chose to tie the context terms: the full model's terms as the untied fit read
    #: them (empty otherwise); half their difference from ``fit.terms`` is part of the interval
    untied: Mapping[str, float] = field(default_factory=dict)

    @property
    def tied(self) -> bool:
        """Whether the layer types' context terms are tied by their attention work per key."""
        return self.model.tied

    def per_layer(self) -> dict[str, LayerCost]:
        """Seconds a layer of each type adds: per step, token, expert, key attended and key read."""
        return self.model.per_layer(self.coefficients)

    def floors_at(self) -> dict[str, tuple[float, float]]:
        """Per layer type, the floors (per key attended, per key read) its context terms were held to."""
        return self.model.floors_at({**dict.fromkeys(JOINT_TERMS, 0.0), **self.lower})


@dataclass(frozen=True)
class _Groups:
    """The fitted groups of every slice: shape, median time, the slice it was measured on, features."""

    shapes: list[Step]
    times: list[float]
    layouts: list[Layout]
    rows: list[list[float]]

    def scaled(self) -> list[list[float]]:
        return [[x / t for x in row] for row, t in zip(self.rows, self.times, strict=True)]

    def predicted(self, coef: Mapping[str, float]) -> list[float]:
        return [sum(coef[t] * x for t, x in zip(JOINT_TERMS, row, strict=True)) for row in self.rows]


def _groups(slices: Sliced, model: JointModel) -> _Groups:
    found = [(shape, t, lay) for lay, samples in slices for shape, t, _ in group_steps(samples)]
    if not found:
        raise FitError("no finished step with a positive time to fit")
    return _Groups([g[0] for g in found], [g[1] for g in found], [g[2] for g in found],
                   [model.features(shape, lay) for shape, _, lay in found])


def _fit_rows(groups: _Groups, lower: Sequence[float]) -> dict[str, float]:
    scaled = groups.scaled()
    try:
        coef = solve.nnls(scaled, [1.0] * len(scaled), lower)
    except solve.SolveError:
        raise FitError(f"no fit of the step model to {len(scaled)} groups of steps") from None
    return dict(zip(JOINT_TERMS, coef, strict=True))


def _with_floors(groups: _Groups, model: JointModel, floors: bool
                 ) -> tuple[dict[str, float], list[float], floors_.Rates | None]:
    """Fit, read this machine's rates off the full model's terms, hold the context terms at their floors,
    fit again (``FLOOR_PASSES`` times)."""
    lower = [0.0] * len(JOINT_TERMS)
    coef = _fit_rows(groups, lower)
    rate = None
    for _ in range(FLOOR_PASSES if floors else 0):
        rate = floors_.rates(model.config, model.full, Fit(model.full_terms(coef), model.routing()))
        lower = model.lower(rate)
        coef = _fit_rows(groups, lower)
    if model.tied:  # one attention term, split by each type's work per key
        coef["window_context"] = 0.0
    return coef, lower, rate


def _worst(groups: _Groups, coef: Mapping[str, float], full: Layout) -> Residual:
    """The group the joint fit explains worst, with the prediction on the slice it was measured on."""
    predicted = groups.predicted(coef)
    misses = [abs(p - t) / t for p, t in zip(predicted, groups.times, strict=True)]
    at = max(range(len(misses)), key=lambda i: (misses[i], i))
    lay = groups.layouts[at]
    where = None if lay == full else f"a slice of {lay.describe()}"
    return Residual(groups.shapes[at], groups.times[at], predicted[at], where)


def _covariance(groups: _Groups, coef: Mapping[str, float], lower: Sequence[float]) -> solve.Matrix:
    """The joint coefficients' bootstrap covariance (a wild bootstrap of the groups' relative residuals)."""
    return solve.bootstrap_covariance(groups.scaled(), [coef[t] for t in JOINT_TERMS], lower)


def _uncertainty(groups: _Groups, coef: Mapping[str, float], lower: Sequence[float], cov: solve.Matrix,
                 model: JointModel, spread: float) -> Uncertainty:
    """The joint coefficients' covariance ``cov`` carried to the full model's terms, the steps' spread
    and the groups' misfit."""
    values = [coef[t] for t in JOINT_TERMS]
    names = tuple(model.full_terms(coef))
    units = [model.full_terms({t: float(t == j) for t in JOINT_TERMS}) for j in JOINT_TERMS]
    matrix = [[unit[n] for unit in units] for n in names]
    full_cov = tuple(tuple(r) for r in solve.transform(cov, matrix))
    residuals = [(p - t) / t for p, t in zip(groups.predicted(coef), groups.times, strict=True)]
    active = sum(1 for v, low in zip(values, lower, strict=True) if v > low)
    return Uncertainty(names, full_cov, spread, misfit(residuals, active, spread))


#: a term is resolved when its bootstrap standard deviation is at most this share of its value
RESOLVED_SD = 0.5

#: ... and when at least this share of what it multiplies (its column's norm) is something the
#: other terms, added non-negatively, cannot make
RESOLVED_OUTSIDE = 0.01


def _resolved(groups: _Groups, coef: Mapping[str, float], cov: solve.Matrix, term: str) -> bool:
    """Whether the steps pin ``term`` down: the other terms cannot stand in for it, and its
    bootstrap spread is small beside its value.

    Past a sliding window every query sees the window, so the window term moves with
    ``per_token`` (prefill chunks) and ``per_seq`` (decodes); only steps inside the window tell
    it apart, and they carry little of any step's time.  Unresolved, it is tied to its full
    twin by attention work per key (the same kernel per key) rather than left to noise, and the
    interval keeps half the distance to the untied reading (``Uncertainty.widened``).
    """
    i = JOINT_TERMS.index(term)
    apart = _outside(groups.scaled(), i) >= RESOLVED_OUTSIDE
    return apart and math.sqrt(cov[i][i]) <= RESOLVED_SD * coef[term]


def _outside(rows: Sequence[Sequence[float]], i: int) -> float:
    """The share of column ``i``'s norm the other columns, added non-negatively, leave unexplained."""
    column = [r[i] for r in rows]
    norm = math.hypot(*column)
    if norm == 0.0:
        return 0.0
    others = [[x for j, x in enumerate(r) if j != i] for r in rows]
    try:
        c = solve.nnls(others, column)
    except solve.SolveError:
        return 1.0
    left = [x - sum(a * b for a, b in zip(c, r, strict=True)) for x, r in zip(column, others, strict=True)]
    return math.hypot(*left) / norm


def fit_slices(slices: Sliced, full: Layout, config: Mapping[str, object], origin: str | None = None,
               floors: bool = True) -> Forecast:
    """One fit over the steps of every slice (each with its layout); the full model's terms.

    With one "slice" that is the model itself, this is the model's own fit.  ``floors``: hold the
    context and read terms at or above the shape's floors at this machine's measured rates.
    """
    pooled = [x for _, samples in slices for x in samples]
    both = full.has_full and full.has_sliding
    model = JointModel.of(config, full, both and not separable(pooled))
    groups = _groups(slices, model)
    coef, lower, rate = _with_floors(groups, model, floors)
    cov = _covariance(groups, coef, lower)
    untied: dict[str, float] = {}
    if both and not model.tied and not _resolved(groups, coef, cov, "window_context"):
        untied = model.full_terms(coef)
        model = JointModel.of(config, full, True)
        groups = _groups(slices, model)
        coef, lower, rate = _with_floors(groups, model, floors)
        cov = _covariance(groups, coef, lower)
    kept = model.full_terms(coef)
    apart = {t: untied.get(t, 0.0) - v for t, v in kept.items()} if untied else {}
    spread = step_spread(*(samples for _, samples in slices))
    fit = Fit(
        kept,
        model.routing(),
        _worst(groups, coef, full),
        groups=len(groups.times),
        steps=len(pooled),
        origin=origin or f"forecast to {full.depth} layers from {len(slices)} slices",
        points=tuple((s, t) for s, t, lay in zip(groups.shapes, groups.times, groups.layouts, strict=True)
                     if lay == full),
        uncertainty=_uncertainty(groups, coef, lower, cov, model, spread).widened(apart),
    )
    return Forecast(fit, coef, model, dict(zip(JOINT_TERMS, lower, strict=True)), rate, untied)
