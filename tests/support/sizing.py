"""Model configs and synthetic steps the sizing tests share (``unit/logic/sizing/``,
``unit/commands/test_calibrate.py``): no vLLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_enginedead.logic.inputs.modelconfig import MODELS_DIR
from pytest_enginedead.logic.sizing import forecast, slices
from pytest_enginedead.logic.sizing.fit import Step

#: the report's model, config only (the preset ``gemma-4-26b-a4b``, shipped with the package)
GEMMA_26B = Path(MODELS_DIR) / "gemma-4-26b-a4b"
#: the report's family shrunk (the preset ``gemma-4-moe-mini``): runs here with dummy weights
GEMMA_MOE = Path(MODELS_DIR) / "gemma-4-moe-mini"


def config_26b() -> dict[str, Any]:
    """Gemma-4 26B-A4B's config.json (its preset), the model sizing is proven on."""
    return json.loads((GEMMA_26B / "config.json").read_text())


#: the terms synthetic steps are made from
TRUE = {
    "fixed": 0.2,
    "per_seq": 0.01,
    "per_token": 0.1,
    "per_context_token": 2e-5,
    "per_window_context_token": 5e-6,
}

#: steps of every kind: decodes alone, a long prompt, long contexts with a window
SHAPES = [Step(n, n, n * 3, n * 3) for n in (1, 8, 32, 128)] + [
    Step(8, 128, 8 * 136, 8 * 136),
    Step(9, 2048, 2_100_000, 1_500_000),
    Step(9, 9, 2100 + 30, 1024 + 30),
    Step(1, 512, 131_328, 60_000),
    Step(4, 4, 4 * 2000, 4 * 1024),
]


def slice_steps(
    lay: slices.Layout, coef: dict[str, float], cfg: dict[str, Any], tied: bool = False
) -> list[tuple[Step, float]]:
    """The ``SHAPES`` steps of a depth slice, timed by the joint model's ``coef`` (the forecast's)."""
    weights = forecast.layer_weights(cfg, slices.layout(cfg))
    out = []
    for s in SHAPES:
        feats = forecast._features(s, lay, weights, tied)
        out.append((s, sum(coef[t] * x for t, x in zip(forecast.JOINT_TERMS, feats, strict=True))))
    return out

#: the forecast's coefficients the slices' steps are made from
COEF = {
    "fixed": 0.05,
    "per_seq": 0.15,
    "per_token": 0.01,
    "layer_fixed": 0.01,
    "layer_per_token": 0.025,
    "full_context": 3e-6,
    "window_context": 2e-6,
    "full_read": 4e-5,
    "window_read": 1e-5,
}
