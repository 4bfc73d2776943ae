"""Model configs and synthetic steps the sizing tests share (``unit/logic/sizing/``,
``unit/commands/test_calibrate.py``): no vLLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_enginedead.logic.inputs.modelconfig import MODELS_DIR
from pytest_enginedead.logic.sizing import joint, slices
from pytest_enginedead.logic.sizing.fit import Step
from pytest_enginedead.logic.sizing.shapes import Chunk, StepPlan

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

#: steps of every kind, as the scheduler forms them (keys attended per token, keys read once per sequence;
#: the 26B's window of 1024): decodes alone at short and long context, prompts whole and chunked, a chunk
#: at long context beside decodes
SHAPES = [p.step(1024) for p in (
    *(StepPlan(n, 3) for n in (1, 8, 32, 128)),
    StepPlan(0, 0, (Chunk(16, 0, 8),)),
    StepPlan(0, 0, (Chunk(16, 0),)),
    StepPlan(8, 20, (Chunk(120, 0),)),
    StepPlan(0, 0, (Chunk(2048, 0),)),
    StepPlan(8, 30, (Chunk(2040, 14000),)),
    StepPlan(1, 600, (Chunk(512, 2000),)),
    *(StepPlan(8, c) for c in (512, 4096, 16384)),
    StepPlan(4, 2000),
)]


def priced(model: joint.JointModel, coef: dict[str, float], step: Step, lay: slices.Layout) -> float:
    """A slice's step time by the joint model's coefficients ``coef``."""
    return sum(coef[t] * x for t, x in zip(joint.JOINT_TERMS, model.features(step, lay), strict=True))


def slice_steps(
    lay: slices.Layout, coef: dict[str, float], cfg: dict[str, Any], tied: bool = False,
    shapes: list[Step] | None = None,
) -> list[tuple[Step, float]]:
    """The ``SHAPES`` steps (or ``shapes``) of a depth slice, timed by the joint model's ``coef``."""
    model = joint.JointModel.of(cfg, slices.layout(cfg), tied)
    return [(s, priced(model, coef, s, lay)) for s in (SHAPES if shapes is None else shapes)]

#: the forecast's coefficients the slices' steps are made from (``joint.JOINT_TERMS``, in order)
COEF = {
    "fixed": 0.05,
    "per_seq": 0.15,
    "per_token": 0.01,
    "layer_fixed": 0.01,
    "layer_per_token": 0.025,
    "layer_expert": 0.002,
    "full_context": 3e-6,
    "window_context": 2e-6,
    "read": 4e-5,
}


def answer_of(adv: Any, lim: Any, fit: Any, forecast: bool = True) -> Any:
    """The smallest sizing answer around an advice: what ``text.advice_lines`` reads of it (the worst step
    as the advice has it, not formed)."""
    from pytest_enginedead.logic.machine import this_machine
    from pytest_enginedead.logic.sizing.answer import SizingAnswer, WorstStep

    step = adv.worst.step(None)
    worst = WorstStep(adv.worst, step, adv.worst_predicted_s or adv.worst_s,
                      adv.worst_interval_s or (adv.worst_s, adv.worst_s), forecast)
    lay = slices.Layout(("full_attention",), None)
    return SizingAnswer("m", None, this_machine(), lim, lay, adv.headroom, fit, worst, adv)
