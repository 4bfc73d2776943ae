"""What ``enginedead calibrate`` sizing must show, on real engines (run it under the engine lock).

    flock /work/engine.lock python bench/sizing.py PART [PART ...]

Each part is one command line of its own (each well under 15 minutes on a 2-core box);
results are merged into bench/sizing-results.json, keyed by part.

validate  the forecast against full-depth steps it never saw (bench/sizing_validate.py):
          validate:tiny, validate:moe, validate:tiny:tp2, validate:moe:tp2 measure;
          validate alone fits what was recorded: MAPE <= 10 %, worst steps +-15 %,
          no under-forecast past -10 %, interval coverage >= its level
defaults  calibrate on gemma-4-moe-mini with vLLM's defaults (128 seqs, 2048 tokens,
          the model's 512 context): wall time                                     <= 10 min
worst     on gemma-4-moe-mini, a serving config whose worst step holds a prefill
          chunk beside >= 32 decodes, formed on the engine: measured vs predicted  within 25 %
forecast  two depth slices of gemma-4-moe-mini forecast the full depth; the full
          model's decode steps at batch 8 and 32 measured on it (calibration.measure):
          forecast vs measured                                                    within 25 %
longctx   gemma-4-moe-mini at a 16K context (its config's context raised): forecast
          from slices 1 and 3, then a real step of 8 decodes at 16K tokens of context
          each measured on the full model: forecast vs measured                    within 15 %
26b       the report's model, config only: gemma-4-26b-a4b from slices 1 and 2 at
          vLLM's defaults, wall time                                              <= 15 min
26b-again the same command again: its worst step vs 26b's                          within 15 %
26b-8k    the same at --max-model-len 8192, wall time                              <= 15 min
26b-noamx 26b's command on a CPU without AMX (refused on one with it): the answer
          where the matrix units are missing, wall time                           <= 15 min
terms     (from the runs above) per-token > 0; every full-attention context term
          (per key attended, per key read) > 0 on the 26B forecasts; the worst step
          holds no more KV cache than the cache it assumes
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_enginedead.logic.inputs.modelconfig import presets
from pytest_enginedead.logic.sizing.fit import Fit, Step
from pytest_enginedead.logic.sizing.terms import Routing

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "sizing-results.json"
#: the model presets (shipped with the package): the report's family shrunk, and the report's model
MOE = presets()["gemma-4-moe-mini"]
G26B = presets()["gemma-4-26b-a4b"]

#: the serving config of ``worst``: 35 decodes at 47 tokens of context beside a prefill chunk,
#: cheap enough to form on a 2-core box (every decode's context is prefilled first)
WORST_LIMITS = ("--max-num-seqs", "36", "--max-num-batched-tokens", "96", "--max-model-len", "48")


def calibrate(*args: str, timeout: float = 1500) -> tuple[dict[str, Any], float]:
    """``enginedead calibrate ... --json`` in a fresh process: its JSON and wall time."""
    cmd = [sys.executable, "-m", "pytest_enginedead.command", "calibrate", *args, "--json"]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    sys.stderr.write(done.stderr)
    return json.loads(done.stdout), wall


def text(out: dict[str, Any]) -> str:
    """What a part shows of calibrate's JSON: the worst step, its interval, and the answer's deadline."""
    worst, rec = out["worst_step"], out["recommend"]
    low, high = worst["interval_s"]
    return (f"worst step: {worst['plan']['described']}; predicted {worst['predicted_s']:.3g} s "
            f"({low:.3g}-{high:.3g} s), measured {worst.get('measured_s')}; deadline {rec['deadline_s']} s; "
            f"terms {out['fit']['terms']}")


def fit_from(out: dict[str, Any]) -> Fit:
    """The step model calibrate's JSON carries (its terms and, for a mixture of experts, its routing)."""
    routing = out["fit"].get("routing")
    return Fit({k.removesuffix("_s"): v for k, v in out["fit"]["terms"].items()},
               None if routing is None else Routing(**routing))


def part_defaults() -> dict[str, Any]:
    out, wall = calibrate("--model", MOE, "--plot", str(HERE / "sizing-gemma4-moe.png"))
    print(text(out))
    print(f"wall {wall:.0f} s (budget 600 s)")
    return {"wall_s": wall, "target": "<= 600 s", "ok": wall <= 600, "output": out}


def part_worst() -> dict[str, Any]:
    out, wall = calibrate("--model", MOE, *WORST_LIMITS)
    print(text(out))
    worst = out["worst_step"]
    formed = worst.get("formed")
    if formed is None:
        raise RuntimeError(f"the worst step was not formed: {worst.get('note')}")
    plan = worst["plan"]
    ratio = formed["predicted_s"] / formed["measured_s"]
    bound_ratio = worst["predicted_s"] / formed["measured_s"]
    print(f"worst step: {plan['described']}; formed {formed['seqs']} seqs / {formed['tokens']} tokens, "
          f"measured {formed['measured_s']:.2f} s, predicted {formed['predicted_s']:.2f} s "
          f"(ratio {ratio:.3f}); the bound's prediction {worst['predicted_s']:.2f} s "
          f"(ratio {bound_ratio:.3f})")
    ok = plan["decodes"] >= 32 and bool(plan["chunks"]) and abs(ratio - 1) <= 0.25
    return {"wall_s": wall, "decodes": plan["decodes"], "chunks": plan["chunks"], "formed": formed,
            "bound_predicted_s": worst["predicted_s"], "ratio": ratio, "bound_ratio": bound_ratio,
            "target": "within 25 %", "ok": ok, "output": out}


def part_forecast() -> dict[str, Any]:
    from pytest_enginedead.harness.measure import measure
    from pytest_enginedead.logic.sizing.shapes import StepPlan

    out, wall = calibrate("--model", MOE, "--forecast-layers", "1,3", "--max-num-seqs", "32")
    print(text(out))
    t0 = time.monotonic()
    full = measure(MOE, [8, 32], steps=8, rounds=2)
    measured_wall = time.monotonic() - t0
    model = fit_from(out)
    window = out["layout"]["sliding_window"]
    rows = []
    for r in full:
        n = r.batch_size
        # measure() decodes one-token prompts for a few tokens: contexts of 2..6
        predicted = model.predict(StepPlan(n, 4).step(window))
        rows.append({"batch_size": n, "measured_p50_s": r.p50_s, "forecast_s": predicted,
                     "ratio": predicted / r.p50_s})
        print(f"batch {n}: full depth measured p50 {r.p50_s:.3f} s, forecast from slices "
              f"{predicted:.3f} s (ratio {predicted / r.p50_s:.3f})")
    ok = all(abs(row["ratio"] - 1) <= 0.25 for row in rows)
    return {"wall_s": wall, "measure_wall_s": measured_wall, "rows": rows, "target": "within 25 %", "ok": ok,
            "output": out}


def part_26b(*extra: str, plot: bool = True) -> dict[str, Any]:
    """The reported model from slices 1 and 2; at vLLM's defaults (no ``extra``) it draws the plot."""
    out, wall = calibrate("--model", G26B, "--forecast-layers", "1,2", *extra,
                          *(("--plot", str(HERE / "sizing-26b.png")) if plot and not extra else ()))
    print(text(out))
    print(f"wall {wall:.0f} s (budget 900 s)")
    worst = out["worst_step"]
    held, cache = worst.get("kv_cache_held_bytes"), worst.get("kv_cache_bytes")
    fits = held is None or cache is None or held <= cache
    return {"wall_s": wall, "target": "<= 900 s; the worst step fits its KV cache",
            "ok": wall <= 900 and fits,
            "worst_predicted_s": worst["predicted_s"], "interval_s": worst["interval_s"],
            "binding": worst["binding"], "fits_kv_cache": fits, "output": out}


def part_26b_again() -> dict[str, Any]:
    first = json.loads(RESULTS.read_text()).get("26b") if RESULTS.exists() else None
    if not first or "worst_predicted_s" not in first:
        raise RuntimeError("run the part 26b first")
    again = part_26b()
    ratio = again["worst_predicted_s"] / first["worst_predicted_s"]
    print(f"worst step: {first['worst_predicted_s']:.1f} s then {again['worst_predicted_s']:.1f} s "
          f"(ratio {ratio:.3f})")
    return {**again, "first_worst_predicted_s": first["worst_predicted_s"], "ratio": ratio,
            "target": "within 15 % of 26b's worst step; <= 900 s",
            "ok": again["ok"] and abs(ratio - 1) <= 0.15}


def part_26b_8k() -> dict[str, Any]:
    return part_26b("--max-model-len", "8192")


def part_26b_noamx() -> dict[str, Any]:
    """``26b``'s command where the CPU has no AMX: the answer moves several-fold with the matrix
    units, so the docs show it on both kinds (recorded apart from ``26b``, which keeps its machine)."""
    from pytest_enginedead.logic.machine import this_machine

    if {"amx_bf16", "amx_tile"} & set(this_machine().get("isa_flags") or ()):
        raise RuntimeError("26b-noamx is the answer on a CPU without AMX; this one has AMX: run 26b")
    return part_26b(plot=False)


def long_context_model() -> str:
    """gemma-4-moe-mini with its context raised to 32K (a config of its own in a scratch directory)."""
    config = json.loads((Path(MOE) / "config.json").read_text())
    config["max_position_embeddings"] = 32768
    directory = Path(tempfile.mkdtemp(prefix="enginedead-longctx-")) / "gemma-4-moe-long"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


#: the long-context check: the context, the model's length, the decodes of the real step
LONG, LONG_LEN, LONG_DECODES = 16384, 16448, 8


def measure_long_step(model: str) -> dict[str, Any]:
    """A real step on the full model: ``LONG_DECODES`` decodes at ``LONG`` tokens of context each (one
    long prompt prefilled, then as many prompts that go on past it, found in the prefix cache)."""
    from pytest_enginedead.harness.engines.offline import Engine
    from pytest_enginedead.harness.engines.reaper import Reaper
    from pytest_enginedead.logic.planning.engines import DeadlineAndFaults as Instructions
    from pytest_enginedead.logic.planning.engines import EngineSpec
    from pytest_enginedead.logic.sizing.result import samples_of

    spec = EngineSpec(model, LONG_DECODES, extra_args=(("max_model_len", LONG_LEN),
                                                       ("max_num_batched_tokens", 2048)), kv_cache_gib=3)
    reaper = Reaper()
    engine = Engine(spec, reaper=reaper)
    t0 = time.monotonic()
    try:
        engine.start(Instructions(3600, "bench (long step)"), None)
        engine.drive([(engine.prompts([1, 1], 7), 3)])
        base = engine.prompts([LONG], 11)[0]
        engine.drive([([base], 2)])
        seen = len(engine.evidence.steps())
        prompts = engine.prompts([LONG + 8] * LONG_DECODES, 12)
        for p in prompts:
            p[:LONG] = base
        engine.drive([(prompts, 7)])
        steps = engine.evidence.steps()[seen:]
    finally:
        engine.stop()
        reaper.close()
    full = sorted(((s, t) for s, t in samples_of(steps) if s.seqs == s.tokens == LONG_DECODES),
                  key=lambda p: p[1])
    if not full:
        raise RuntimeError(f"no step of {LONG_DECODES} decodes was recorded: {steps}")
    shape, median = full[len(full) // 2]
    return {"steps": len(full), "median_s": median, "min_s": full[0][1], "max_s": full[-1][1],
            "shape": shape.as_dict(), "wall_s": time.monotonic() - t0}


def part_longctx() -> dict[str, Any]:
    model = long_context_model()
    out, wall = calibrate("--model", model, "--forecast-layers", "1,3", "--max-num-seqs", "8",
                          "--max-model-len", str(LONG_LEN))
    print(text(out))
    real = measure_long_step(model)
    model_fit = fit_from(out)
    forecast = model_fit.predict(Step(**real["shape"]))
    ratio = forecast / real["median_s"]
    print(f"{LONG_DECODES} decodes at {LONG} tokens of context on the full model: measured "
          f"{real['median_s']:.3f} s (median of {real['steps']}, {real['min_s']:.3f}-{real['max_s']:.3f}), "
          f"forecast from slices {forecast:.3f} s (ratio {ratio:.3f})")
    return {"wall_s": wall, "real": real, "forecast_s": forecast, "ratio": ratio, "target": "within 15 %",
            "ok": abs(ratio - 1) <= 0.15, "output": out}


def _terms_of(name: str, out: dict[str, Any]) -> dict[str, Any]:
    terms = out["fit"]["terms"]
    worst = out["worst_step"]
    held, cache = worst.get("kv_cache_held_bytes"), worst.get("kv_cache_bytes")
    keys = ("per_token_s", "per_context_token_s", "per_read_token_s", "per_window_context_token_s",
            "per_window_read_token_s")
    fits = held is None or cache is None or held <= cache
    return {**{k: terms.get(k) for k in keys}, "fits_kv_cache": fits,
            "context_required": name.startswith("26b")}


def _terms_hold(t: dict[str, Any]) -> bool:
    context = (t["per_context_token_s"] or 0) > 0 and (t["per_read_token_s"] or 0) > 0
    return (t["per_token_s"] or 0) > 0 and t["fits_kv_cache"] and (context or not t["context_required"])


def part_terms(results: dict[str, Any]) -> dict[str, Any]:
    """Per-token > 0 everywhere; every full-attention context term > 0 on the 26B forecasts (each is
    held at least at the floor the model's shape gives at this machine's rates); the worst step fits the
    KV cache it assumes."""
    found = {}
    for name in ("defaults", "worst", "forecast", "longctx", "26b", "26b-again", "26b-8k"):
        out = results.get(name, {}).get("output")
        if out:
            found[name] = _terms_of(name, out)
            print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in found[name].items()))
    ok = any(n.startswith("26b") for n in found) and all(_terms_hold(t) for t in found.values())
    return {"runs": found, "target": "per-token > 0; full-attention context terms > 0 on the 26B forecasts; "
            "the worst step fits its KV cache", "ok": ok}


PARTS = {"defaults": part_defaults, "worst": part_worst, "forecast": part_forecast, "longctx": part_longctx,
         "26b": part_26b, "26b-again": part_26b_again, "26b-8k": part_26b_8k, "26b-noamx": part_26b_noamx}


def _validate() -> Any:
    """``bench/sizing_validate.py``, beside this file."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import sizing_validate

    return sizing_validate


def main(argv: list[str]) -> int:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in argv or [*PARTS, "terms"]:
        if name == "terms":
            results["terms"] = part_terms(results)
        elif name == "validate" or name.startswith("validate:"):
            print(f"== {name}", flush=True)
            results["validate"] = _validate().part(name, results, argv)
        elif name in PARTS:
            print(f"== {name}", flush=True)
            results[name] = PARTS[name]()
        else:
            print(f"unknown part {name!r}; parts: {', '.join([*PARTS, 'terms'])}", file=sys.stderr)
            return 2
        key = "validate" if name.startswith("validate") else name
        results[key]["when"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        RESULTS.write_text(json.dumps(results, indent=1, default=str) + "\n")
    failed = [n for n, r in results.items() if isinstance(r, dict) and r.get("ok") is False]
    print(f"{'FAIL: ' + ', '.join(failed) if failed else 'OK'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
