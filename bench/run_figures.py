"""``bench/results.json`` as the benchmarks page shows it: one table per question, one row per benchmark.

Each row carries the machine the result records (``logic.machine.cpu_words`` / ``vector_words``), the
day it was measured and the command that measures it again, so a figure on the page is never a hand
copy that a new run left behind.  A result written before ``bench/run.py`` kept the machine says
"not recorded" rather than a machine typed by hand.  ``docs/hooks.py`` writes the tables between
``<!-- generated: NAME -->`` markers; ``tests/unit/test_docs.py`` fails when a committed table differs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_enginedead.logic import machine as fingerprint

HEADER = ("what", "result", "target: met", "machine", "date", "command")
#: what a row says where its result kept no machine
NOT_RECORDED = "not recorded"


def machine(record: dict[str, Any]) -> str:
    """Where a result was measured, as it recorded it: CPU, vector ISA, cores."""
    m = record.get("machine") or {}
    if not m:
        return NOT_RECORDED
    return fingerprint.machine_words(m)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _ratio_pairs(r: dict[str, Any]) -> str:
    """A side-by-side ratio, its pairs' span and the control's (two like engines)."""
    pairs = r.get("pair_ratios") or []
    span = f"pairs {min(pairs):.3f}–{max(pairs):.3f}; " if pairs else ""
    return f"**{r['ratio']:.3f}** ({span}control {r['control_ratio']:.3f})"


def _met(target: str | None, met: bool | None) -> str:
    if not target:
        return "—"
    return f"{target.replace('<=', '≤')}: " + ("yes" if met else "**no**")


def _within(r: dict[str, Any], value: float) -> bool:
    """Whether ``value`` meets the result's ``<= X`` target."""
    limit = float(str(r["target"]).split()[1])
    return value <= limit


#: (benchmark, what, result and target) in the order each table shows them
Figure = tuple[str, str, Callable[[dict[str, Any]], tuple[str, str]]]


def _start(r: dict[str, Any]) -> tuple[str, str]:
    return (f"{r['median_harness_s']:.2f} s ÷ {r['median_bare_s']:.2f} s = **{r['ratio']:.3f}**",
            _met(r["target"], _within(r, r["ratio"])))


def _kv_start(r: dict[str, Any]) -> tuple[str, str]:
    text = f"{r['median_bare_s']:.2f} s ÷ {r['median_bare_1gib_s']:.2f} s = **{r['kv_sized_ratio']:.2f}**"
    return text, "—"


def _stop(r: dict[str, Any]) -> tuple[str, str]:
    return f"**{r['median_stop_harness_s']:.2f} s** vs {r['median_stop_vllm_s']:.2f} s", "—"


def _side_by_side(r: dict[str, Any]) -> tuple[str, str]:
    return (f"{_ms(r['median_on_s'])} ÷ {_ms(r['median_off_s'])} = {_ratio_pairs(r)}",
            _met(r["target"], _within(r, r["ratio"])))


def _direct_record(r: dict[str, Any]) -> tuple[str, str]:
    whole, bare = r["direct_record_s_per_step"], r["direct_record_s_per_step_without_watch"]
    return f"**{whole * 1e6:.1f} µs** a step (the deadline watch {(whole - bare) * 1e6:.1f} µs of it)", "—"


def _direct_layers(r: dict[str, Any]) -> tuple[str, str]:
    return (f"**{r['direct_s_per_layer'] * 1e6:.2f} µs** a layer, {r['direct_share'] * 100:.2f} % of a "
            f"{r['layers']}-layer step of {_ms(r['median_off_s'])}", "—")


def _metrics(r: dict[str, Any]) -> tuple[str, str]:
    return (f"**{r['direct_s_per_rpc'] * 1e6:.1f} µs** a step RPC, {r['rpcs_per_step']} a step: "
            f"{r['direct_share'] * 100:.2f} % of a batch-1 step",
            _met("≤ 1 %", _within(r, r["direct_share"])))


COST: tuple[Figure, ...] = (
    ("start", "engine start, the harness ÷ a bare `LLM(...)` with the same KV cache (median of 3)",
     _start),
    ("start", "engine start, the KV cache sized for its sequences ÷ a fixed 1 GiB", _kv_start),
    ("start", "engine stop, the harness (SIGTERM, 1 s, SIGKILL) vs vLLM's own shutdown", _stop),
    ("record", "decode step at batch 64, the plugin's record of each step on ÷ the plugin inert",
     _side_by_side),
    ("step", "the same, plus `assert_no_false_death`'s liveness sampler", _side_by_side),
    ("step", "the record of each step alone, timed directly on a step that does nothing", _direct_record),
    ("layers", "batch-1 step with each layer noted as it begins ÷ without", _side_by_side),
    ("layers", "each layer's note alone, timed directly", _direct_layers),
    ("metrics", "the metrics' writes alone, timed directly", _metrics),
)


def _server_start(r: dict[str, Any]) -> tuple[str, str]:
    return (f"{r['median_harness_s']:.2f} s ÷ {r['median_bare_s']:.2f} s = **{r['ratio']:.3f}**",
            _met(r["target"], _within(r, r["ratio"])))


def _server_cold(r: dict[str, Any]) -> tuple[str, str]:
    runs = ", ".join(f"{s:.1f} s" for s in r["cold_reproduction_s"])
    verdict = max(r["verdict_s"]) * 1e3
    return f"**{runs}**; the verdict {verdict:.0f} ms after the death", "—"


def _check(r: dict[str, Any]) -> tuple[str, str]:
    met = r["median_wall_s"] <= 60 and r["engines_started"] <= 2 and r["stdout_lines"] < 30 and r["clean"]
    return (f"**{r['median_wall_s']:.1f} s**, {r['engines_started']} engine, {r['stdout_lines']} lines",
            _met("≤ 60 s, ≤ 2 engines, < 30 lines", met))


def _verdict(r: dict[str, Any]) -> tuple[str, str]:
    each = ", ".join(f"{s * 1e3:.0f}" for s in r["verdict_s"])
    return f"{each} ms: max **{r['max_verdict_s']:.3f} s**", _met("≤ 0.5 s", r["max_verdict_s"] <= 0.5)


def _offline_cold(r: dict[str, Any]) -> tuple[str, str]:
    runs = r["cold_reproduction_s"]
    return f"median **{r['median_cold_reproduction_s']:.1f} s** ({min(runs):.1f}–{max(runs):.1f})", "—"


def _xdist(r: dict[str, Any]) -> tuple[str, str]:
    same = "same outcomes" if r["same_outcomes"] else "**outcomes differ**"
    runs = (r.get("runs") or {}).get("n0") or [{}]
    suite = (f"{len(runs[0]['outcomes'])} tests, {runs[0]['configurations']} configurations: "
             if "outcomes" in runs[0] and "configurations" in runs[0] else "")
    return (f"{suite}{r['median_n0_s']:.1f} s vs {r['median_n2_s']:.1f} s: **{r['speedup']:.2f}× faster**, "
            f"{same}", "—")


JUDGING: tuple[Figure, ...] = (
    ("guard", "a healthy decode step at batch 64 (300 s deadline), the guard on ÷ off", _side_by_side),
    ("verdict", "`EngineDeadError` reaching the test → the verdict (3 real false deaths)", _verdict),
    ("verdict", "the false death reproduced cold, offline engine (fresh pytest, engine start included)",
     _offline_cold),
    ("server", "API server start, the harness ÷ bare `python -m vllm.entrypoints.openai.api_server`, "
               "ready at `/health`", _server_start),
    ("server", "the false death reproduced cold through the server (server start included)", _server_cold),
    ("check", "`enginedead check` on the bundled model: wall, engines started, lines printed", _check),
    ("xdist", "a downstream suite, `-n 0` vs `-n 2 --dist loadgroup`", _xdist),
)


def _row(name: str, what: str, result: str, target: str, record: dict[str, Any]) -> str:
    command = record.get("command") or f"python bench/run.py {name}"
    cells = (what, result, target, machine(record), str(record.get("measured", ""))[:10] or NOT_RECORDED,
             f"`{command}`")
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _table(results: dict[str, Any], figures: tuple[Figure, ...]) -> str:
    rows = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for name, what, show in figures:
        record = results.get(name)
        if isinstance(record, dict):
            result, target = show(record)
            rows.append(_row(name, what, result, target, record))
    if len(rows) == 2:
        return "_Nothing recorded yet: `python bench/run.py` (it starts engines)._"
    unrecorded = any(f"| {NOT_RECORDED} |" in row for row in rows[2:])
    if unrecorded:
        rows.append("")
        rows.append(f'A machine "{NOT_RECORDED}": measured before `bench/run.py` kept the machine with its '
                    "result (the page that first showed these rows named the EPYC AVX-512 box); run the "
                    "command again to have it.")
    return "\n".join(rows)


def harness_cost(results: dict[str, Any]) -> str:
    """What the harness and the plugin cost an engine's start, stop and step."""
    return _table(results, COST)


def judging(results: dict[str, Any]) -> str:
    """What the guard costs a healthy step, and how fast the harness, the server and ``check`` answer."""
    return _table(results, JUDGING)


def _preload_row(name: str, r: dict[str, Any], record: dict[str, Any]) -> str:
    orders = ", ".join(f"{x:.3f}" for x in r["pair_ratios"])
    control = f"{r['control_ratio']:.3f}" if r.get("control_ratio") is not None else "—"
    cells = (f"{name}, batch {r['batch']}",
             f"{r['median_with_s']:.3g} s ÷ {r['median_without_s']:.3g} s = **{r['ratio']:.3f}**",
             f"{orders}; control {control}", machine(record), str(record.get("measured", ""))[:10],
             "`python bench/run.py preloads`")
    return "| " + " | ".join(cells) + " |"


def preloads(results: dict[str, Any]) -> str:
    """The median decode step with tcmalloc and iomp preloaded ÷ without, per model."""
    record = results.get("preloads")
    if not isinstance(record, dict):
        return "_Nothing recorded yet: `python bench/run.py preloads` (it starts engines)._"
    rows = ["| model | median step with ÷ without | each start order; control | machine | date | command |",
            "|---|---|---|---|---|---|"]
    for name in ("tiny-llama", "gemma-4-moe-mini"):
        if isinstance(record.get(name), dict):
            rows.append(_preload_row(name, record[name], record))
    return "\n".join(rows)
