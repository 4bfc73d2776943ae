"""The decode-only calibration (``enginedead calibrate --batch-sizes ...``): deadlines per batch size.

Measured steps per batch size, fitted as ``a + b x batch``; each recommended deadline is
``headroom x predicted step``, clamped to [vLLM's stock 300 s, 2 h].
"""

from __future__ import annotations

import os
from typing import Any

from .. import releases
from ..machine import preload_note
from ..timeouts.policies import STOCK_DEADLINE_S, Backend, TimeoutPolicy, fit_step_time


def calibration(
    results: list[dict[str, Any]], headroom: float, stock: float, **facts: Any
) -> tuple[dict[str, Any], TimeoutPolicy]:
    """From measured steps: the fit, the calibrated policy, and per batch what to set."""
    samples = {r["batch_size"]: r["p99_s"] for r in results}
    policy = TimeoutPolicy.calibrated(samples, headroom=headroom)
    a, b = fit_step_time(samples)
    for r in results:
        r["stock_deadline_s"] = stock
        r["stock_fires"] = r["max_s"] > stock
        allowed = policy.timeout_s(Backend.CPU, r["batch_size"])
        r["recommended_s"] = float(releases.deadline_env_value(allowed))
    out = {
        **facts,
        "headroom": headroom,
        "fit": {"a_s": a, "b_s_per_seq": b, "form": "step = a + b x batch"},
        "policy": policy.origin,
        "results": results,
    }
    return out, policy


def format_calibration(out: dict[str, Any], policy: TimeoutPolicy) -> str:
    stock = out["results"][0]["stock_deadline_s"] if out["results"] else STOCK_DEADLINE_S
    fit = out["fit"]
    lines = [
        f"step time on this machine (vLLM {out.get('vllm')}, "
        f"{os.path.basename(str(out.get('model', '')).rstrip('/'))}), "
        f"fitted: {fit['a_s']:.4f} s + {fit['b_s_per_seq']:.5f} s x batch",
        preload_note((out.get("machine") or {}).get("preloads")),
        f"{'batch':>5}  {'p50':>9}  {'p99':>9}  {f'stock {stock:g} s':>12}  recommended deadline",
    ]
    for r in out["results"]:
        fires = "FIRES" if r["stock_fires"] else "ok"
        lines.append(
            f"{r['batch_size']:>5}  {r['p50_s']:>8.4f}s  {r['p99_s']:>8.4f}s  {fires:>12}  "
            f"export {releases.DEADLINE_ENV}={int(r['recommended_s'])}"
        )
    lines.append(
        f"calibrated policy: {policy.origin}, clamped to "
        f"[{STOCK_DEADLINE_S:g} s, {policy.ceiling_s(Backend.CPU):g} s]"
    )
    return "\n".join(lines)
