"""The decode-only calibration (``enginedead calibrate --batch-sizes ...``): deadlines per batch size.

Measured steps per batch size (``DecodeSteps``), fitted as ``a + b x batch``; each recommended
deadline is ``headroom x predicted step``, clamped to [vLLM's stock 300 s, 2 h].  One typed
answer (``Calibration``), read by the text (``format_calibration``), the JSON
(``calibration_json``) and the plot (``commands/plots.plot``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import releases
from ..machine import Machine, preload_note
from ..timeouts.policies import STOCK_DEADLINE_S, Backend, TimeoutPolicy, fit_step_time


@dataclass(frozen=True)
class DecodeSteps:
    """Decode steps of one batch size, as measured."""

    batch_size: int
    steps: int
    p50_s: float
    p99_s: float
    max_s: float
    start_s: float | None = None


@dataclass(frozen=True)
class DecodeRow:
    """One batch size's steps and what to set for it."""

    measured: DecodeSteps
    stock_deadline_s: float
    recommended_s: float

    @property
    def stock_fires(self) -> bool:
        return self.measured.max_s > self.stock_deadline_s


@dataclass(frozen=True)
class Calibration:
    """The decode-only calibration's answer."""

    headroom: float
    a_s: float
    b_s_per_seq: float
    policy: TimeoutPolicy
    rows: tuple[DecodeRow, ...]
    vllm: str | None = None
    model: str = ""
    machine: Machine | None = None
    plot: str | None = None
    log: str | None = None


def calibration(measured: Sequence[DecodeSteps], headroom: float, stock: float, vllm: str | None = None,
                model: str = "", machine: Machine | None = None) -> Calibration:
    """From measured steps: the fit, the calibrated policy, and per batch what to set."""
    samples = {m.batch_size: m.p99_s for m in measured}
    policy = TimeoutPolicy.calibrated(samples, headroom=headroom)
    a, b = fit_step_time(samples)
    rows = tuple(DecodeRow(m, stock, _recommended(policy, m.batch_size)) for m in measured)
    return Calibration(headroom, a, b, policy, rows, vllm, model, machine)


def _recommended(policy: TimeoutPolicy, batch: int) -> float:
    return float(releases.deadline_env_value(policy.timeout_s(Backend.CPU, batch)))


def calibration_json(c: Calibration) -> dict[str, Any]:
    """The answer as ``--json`` prints it (the one place it becomes a dict)."""
    out: dict[str, Any] = {
        "vllm": c.vllm, "model": c.model, "machine": c.machine, "headroom": c.headroom,
        "fit": {"a_s": c.a_s, "b_s_per_seq": c.b_s_per_seq, "form": "step = a + b x batch"},
        "policy": c.policy.origin,
        "results": [{**dataclasses.asdict(r.measured), "stock_deadline_s": r.stock_deadline_s,
                     "stock_fires": r.stock_fires, "recommended_s": r.recommended_s} for r in c.rows],
    }
    for key in ("plot", "log"):
        if getattr(c, key) is not None:
            out[key] = getattr(c, key)
    return out


def format_calibration(c: Calibration) -> str:
    stock = c.rows[0].stock_deadline_s if c.rows else STOCK_DEADLINE_S
    lines = [
        f"step time on this machine (vLLM {c.vllm}, {os.path.basename(c.model.rstrip('/'))}), "
        f"fitted: {c.a_s:.4f} s + {c.b_s_per_seq:.5f} s x batch",
        preload_note(None if c.machine is None else c.machine.get("preloads")),
        f"{'batch':>5}  {'p50':>9}  {'p99':>9}  {f'stock {stock:g} s':>12}  recommended deadline",
    ]
    for r in c.rows:
        fires = "FIRES" if r.stock_fires else "ok"
        lines.append(
            f"{r.measured.batch_size:>5}  {r.measured.p50_s:>8.4f}s  {r.measured.p99_s:>8.4f}s  {fires:>12}  "
            f"export {releases.DEADLINE_ENV}={int(r.recommended_s)}"
        )
    lines.append(
        f"calibrated policy: {c.policy.origin}, clamped to "
        f"[{STOCK_DEADLINE_S:g} s, {c.policy.ceiling_s(Backend.CPU):g} s]"
    )
    return "\n".join(lines)
