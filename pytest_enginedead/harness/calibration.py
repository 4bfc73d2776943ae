"""``enginedead calibrate``: what steps cost on this machine, and the deadlines to set.

The front door of ``sizing/``, and the one place its engines run:

* ``measure`` / ``calibration``: decode steps of one-token prompts per batch size, on
  one engine sized for the largest, fitted as ``a + b x batch``; each recommended
  deadline is ``headroom x predicted step``, clamped to [vLLM's stock 300 s, 2 h]
  (``calibrate --batch-sizes ...``);
* ``plan_sizing`` / ``size``: the serving configuration (``--max-num-seqs``,
  ``--max-num-batched-tokens``, ``--max-model-len``): the steps ``sizing.shapes``
  asks for on one engine per model or depth slice, the step model fitted on what
  each step scheduled, the worst step the scheduler can form (formed and measured
  when affordable), and ``sizing.advice``'s deadline, policy and limits.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import statistics
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from .. import compat
from ..contract.steps import StepTime
from ..face import report
from ..logic.planning import EngineSpec, Instructions
from ..logic.policy import STOCK_DEADLINE_S, Backend, TimeoutPolicy, fit_step_time
from ..logic.sizing import advice, shapes, slices
from ..logic.sizing import fit as fit_
from ..logic.sizing.forecast import Forecast, fit_slices
from .cleanup import Reaper
from .engine import Engine, Progress
from .outputs import Output, claim


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


def measure(
    model: str, batch_sizes: Sequence[int], steps: int, progress: Progress | None = None, rounds: int = 4
) -> list[dict[str, Any]]:
    """Time ``steps`` decode steps per batch size, on one engine sized for the largest.

    Each size is warmed up first (not measured), then the sizes take turns in
    ``rounds`` rounds, the order reversed every other round, so that the machine's
    noise lands on all of them alike.  Prompts are one token, so a round's prefill step
    costs what a decode step of the same batch costs: every step measured is decode-sized.
    """
    sizes = list(batch_sizes)
    largest = max(sizes)
    deadline = TimeoutPolicy.reference().timeout_s(Backend.CPU, largest)
    engine = Engine(EngineSpec(model, largest), reaper=(reaper := Reaper()))
    measured: dict[int, list[float]] = {n: [] for n in sizes}
    per_round = max(1, math.ceil(steps / rounds))
    try:
        engine.start(Instructions(deadline, "calibration (reference policy)"), progress)
        for n in sizes:
            engine.generate(n, max_tokens=4, prompt_len=1)  # warm-up, not measured
        for r in range(rounds):
            if progress:
                progress(f"measuring round {r + 1}/{rounds}: batch sizes {', '.join(map(str, sizes))}")
            for n in sizes if r % 2 == 0 else reversed(sizes):
                # vLLM's engine core may start a step before the last request of a batch has
                # arrived, and the first requests finish first: a run's first and last steps
                # can be smaller than n, so each round asks for two more and tops up.
                for _ in range(3):
                    missing = per_round * (r + 1) - len(measured[n])
                    if missing <= 0:
                        break
                    seen = len(engine.steps())
                    engine.generate(n, max_tokens=missing + 2, prompt_len=1)
                    measured[n] += [s.seconds for s in engine.steps()[seen:]
                                    if s.seconds is not None and s.batch_size == n]
        start_s = engine.start_s
    finally:
        engine.stop()
        reaper.close()
    results = []
    for n in sizes:
        if not measured[n]:
            raise RuntimeError(f"no full decode step at batch {n} was recorded")
        results.append({
            "batch_size": n,
            "steps": len(measured[n]),
            "p50_s": statistics.median(measured[n]),
            "p99_s": _quantile(measured[n], 0.99),
            "max_s": max(measured[n]),
            "start_s": start_s,
        })
    return results


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
        r["recommended_s"] = float(compat.deadline_env_value(policy.timeout_s(Backend.CPU, r["batch_size"])))
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
        f"{'batch':>5}  {'p50':>9}  {'p99':>9}  {f'stock {stock:g} s':>12}  recommended deadline",
    ]
    for r in out["results"]:
        fires = "FIRES" if r["stock_fires"] else "ok"
        lines.append(
            f"{r['batch_size']:>5}  {r['p50_s']:>8.4f}s  {r['p99_s']:>8.4f}s  {fires:>12}  "
            f"export {compat.DEADLINE_ENV}={int(r['recommended_s'])}"
        )
    lines.append(
        f"calibrated policy: {policy.origin}, clamped to "
        f"[{STOCK_DEADLINE_S:g} s, {policy.ceiling_s(Backend.CPU):g} s]"
    )
    return "\n".join(lines)


def plot(out: Output | str, results: list[dict[str, Any]], stock: float, policy: TimeoutPolicy) -> None:
    """Step time against batch size, drawn in the format the file name's extension names.

    Drawn in memory and written through the one writer (``outputs``).
    """
    target = out if isinstance(out, Output) else claim(out, repr(out))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'pytest-enginedead[plot]'") from None
    sizes = [r["batch_size"] for r in results]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(sizes, [r["p50_s"] for r in results], "o-", label="step time p50")
    ax.plot(sizes, [r["p99_s"] for r in results], "s--", label="step time p99")
    ax.axhline(stock, color="red", linestyle=":", label=f"vLLM stock deadline ({stock:g} s)")
    ax.plot(sizes, [r["recommended_s"] for r in results], "^-", color="green", label="recommended deadline")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (concurrent sequences)")
    ax.set_ylabel("seconds")
    ax.set_title("enginedead calibrate: step time vs deadline")
    ax.legend()
    fig.tight_layout()
    drawn = io.BytesIO()
    fig.savefig(drawn, format=os.path.splitext(target.path)[1].lstrip(".").lower() or None)
    plt.close(fig)
    target.write_bytes(drawn.getvalue())


# --- sizing a serving configuration (enginedead calibrate --max-num-seqs ...) --------------

#: forming the worst step is skipped when its requests would take longer than this (the
#: fitted cost of prefilling every decode's context on this machine)
VALIDATE_BUDGET_S = 300.0


class SizingRefused(ValueError):
    """Sizing cannot start (slices, config, memory); the message is one line for the command."""


@dataclass(frozen=True)
class EnginePlan:
    """One engine of a sizing run: the model itself, or one depth slice of it."""

    label: str
    config: dict[str, Any]
    layout: slices.Layout
    depth: int | None  # the slice depth (layers per type), None for the model itself
    limits: shapes.Limits  # what the engine starts with
    kv_cache_gib: int
    memory: slices.Memory

    @property
    def short(self) -> str:
        return "model" if self.depth is None else f"slice {self.depth}"


@dataclass(frozen=True)
class SizingPlan:
    """Everything decided before the first engine starts."""

    model: str
    config: dict[str, Any]
    layout: slices.Layout
    limits: shapes.Limits
    runs: list[shapes.Run]
    engines: list[EnginePlan]
    batch_sizes: tuple[int, ...]
    steps: int
    validate: bool
    #: why the worst step will not be formed, when it will not (and --no-validate did not say so)
    validate_note: str | None = None

    @property
    def window(self) -> int | None:
        return self.layout.window if self.layout.has_sliding else None

    @property
    def forecast(self) -> bool:
        return any(e.depth is not None for e in self.engines)


def default_limits(model: str) -> tuple[dict[str, Any], int | None]:
    """The model's config and the longest max_model_len vLLM derives from it."""
    from ..face.options import read_config

    config = read_config(Path(model) / "config.json")
    return config, shapes.model_max_len(config)


def plan_sizing(
    model: str,
    limits: shapes.Limits,
    batch_sizes: Sequence[int] | None = None,
    steps: int | None = None,
    forecast_depths: Sequence[int] | None = None,
    validate: bool = True,
    available_bytes: int | None = None,
) -> SizingPlan:
    """The runs, the engines and what each needs; ``SizingRefused`` for what cannot work."""
    from ..face.options import read_config

    config = read_config(Path(model) / "config.json")
    where = os.path.join(os.path.basename(model.rstrip("/")), "config.json")
    try:
        lay = slices.layout(config, where)
    except slices.SliceError as exc:
        raise SizingRefused(str(exc)) from None
    window = lay.window if lay.has_sliding else None
    forecast = bool(forecast_depths)
    sizes = tuple(batch_sizes) if batch_sizes else shapes.default_batch_sizes(limits, forecast)
    too_big = [n for n in sizes if n > limits.max_num_seqs]
    if too_big:
        raise SizingRefused(f"--batch-sizes {','.join(map(str, too_big))} exceed --max-num-seqs "
                            f"{limits.max_num_seqs}: vLLM would not schedule that many")
    n_steps = steps or shapes.SIZING_STEPS
    runs = shapes.fit_runs(limits, window, sizes, n_steps)
    longest = max(r.longest for r in runs) + 2
    available = psutil.virtual_memory().available if available_bytes is None else available_bytes
    note = None
    if validate and forecast:
        validate, note = False, "a forecast: the full-depth model is not run"
    if validate:  # forming the worst step needs every sequence's KV cache at max_model_len
        held = [limits.max_model_len] * limits.max_num_seqs
        need = slices.memory(config, slices.kv_cache_gib(config, held))
        if need.total > available:
            validate, note = False, (f"not formed: every sequence at max_model_len needs {need.describe()}, "
                                     f"over the {available / slices.GIB:.1f} GiB available")
    engine_len = limits.max_model_len if validate else min(limits.max_model_len, longest)
    seqs = limits.max_num_seqs if validate else max(r.seqs for r in runs)
    engine_limits = shapes.Limits(max(1, min(seqs, limits.max_num_seqs)), limits.max_num_batched_tokens,
                                  engine_len)
    contexts = [engine_len] * engine_limits.max_num_seqs if validate else _run_contexts(runs)
    engines: list[EnginePlan] = []
    if forecast:
        assert forecast_depths is not None
        problem = slices.slice_depths_problem(lay, forecast_depths)
        if problem:
            raise SizingRefused(f"--forecast-layers {','.join(map(str, forecast_depths))}: {problem}")
        for k in sorted(set(forecast_depths)):
            try:
                sliced = slices.slice_config(config, k)
            except slices.SliceError as exc:
                raise SizingRefused(f"--forecast-layers: {exc}") from None
            sub = slices.layout(sliced)
            kv = slices.kv_cache_gib(sliced, contexts)
            engines.append(EnginePlan(f"slice {k} ({sub.describe()})", sliced, sub, k, engine_limits, kv,
                                      slices.memory(sliced, kv)))
    else:
        kv = slices.kv_cache_gib(config, contexts)
        engines.append(EnginePlan(f"model ({lay.describe()})", config, lay, None, engine_limits, kv,
                                  slices.memory(config, kv)))
    for e in engines:
        if e.memory.total > available:
            what = f"--forecast-layers: {e.label}" if e.depth is not None else f"--model {model}"
            hint = "" if e.depth is not None else "; measure depth slices instead, e.g. --forecast-layers 1,2"
            raise SizingRefused(
                f"{what} needs {e.memory.describe()}, and this machine has "
                f"{available / slices.GIB:.1f} GiB available{hint}"
            )
    return SizingPlan(model, config, lay, limits, runs, engines, sizes, n_steps, validate, note)


def _run_contexts(runs: Sequence[shapes.Run]) -> list[int]:
    """The contexts of the requests of the run that holds the most KV cache at once."""
    heaviest = max(runs, key=lambda r: sum(p + w.max_tokens for w in r.waves for p in w.prompts))
    return [p + w.max_tokens for w in heaviest.waves for p in w.prompts]


@dataclass
class Measured:
    """What one engine recorded: steps per run, and its start time."""

    plan: EnginePlan
    runs: dict[str, list[StepTime]]
    start_s: float | None = None
    worst_formed: tuple[fit_.Step, float] | None = None
    worst_note: str | None = None


def _to_step(s: StepTime) -> fit_.Step | None:
    if s.seconds is None or s.tokens is None or s.context_tokens is None:
        return None
    return fit_.Step(s.batch_size, s.tokens, s.context_tokens, s.window_context_tokens)


def _samples(steps: Iterable[StepTime]) -> list[tuple[fit_.Step, float]]:
    out = []
    for s in steps:
        step = _to_step(s)
        if step is not None and s.seconds is not None:
            out.append((step, s.seconds))
    return out


def _run_one(engine: Engine, run: shapes.Run, seed: int) -> list[StepTime]:
    """Send a run's waves; the steps the engine recorded meanwhile."""
    seen = len(engine.steps())
    first: list[int] | None = None
    waves = []
    for i, wave in enumerate(run.waves):
        prefix = first[: wave.prefix] if first and wave.prefix else None
        prompts = engine.prompts(list(wave.prompts), seed * 100 + i, prefix)
        if first is None and prompts:
            first = prompts[0]
        waves.append((prompts, wave.max_tokens))
    engine.drive(waves)
    return engine.steps()[seen:]


def _measure_engine(plan: SizingPlan, ep: EnginePlan, model_dir: str, progress: Progress | None,
                    reaper: Reaper) -> Measured:
    lim = ep.limits
    spec = EngineSpec(model_dir, lim.max_num_seqs, extra_args=(
        ("max_model_len", lim.max_model_len), ("max_num_batched_tokens", lim.max_num_batched_tokens)),
        kv_cache_gib=ep.kv_cache_gib)
    deadline = TimeoutPolicy.reference().timeout_s(Backend.CPU, lim.max_num_seqs, lim.max_num_batched_tokens)
    engine = Engine(spec, reaper=reaper)
    out = Measured(ep, {})
    try:
        engine.start(Instructions(deadline, "sizing (reference policy)"), progress)
        out.start_s = engine.start_s
        engine.drive([(engine.prompts([1, 1], 7), 3)])  # warm-up, not measured
        for i, run in enumerate(plan.runs):
            if progress:
                progress(f"{ep.short}: {run.name}")
            out.runs[run.name] = _run_one(engine, run, i + 1)
        if plan.validate:
            _validate(plan, ep, engine, out, progress)
    finally:
        engine.stop()
    return out


def _fit_of(plan: SizingPlan, measured: Sequence[Measured]) -> Forecast:
    parts = [(m.plan.layout, _samples(s for name, steps in m.runs.items() if name != WORST for s in steps))
             for m in measured]
    origin = None if plan.forecast else "measured"
    return fit_slices(parts, plan.layout, plan.config, origin)


WORST = "worst step"


def _validate(
    plan: SizingPlan, ep: EnginePlan, engine: Engine, out: Measured, progress: Progress | None
) -> None:
    """Form the worst step on the engine, if the fit says it is affordable here."""
    fitted = _fit_of(plan, [out]).fit
    worst = shapes.worst_step(plan.limits, plan.window, fitted.predict)
    run = shapes.worst_run(worst, plan.limits)
    work, n = shapes.run_work(run, plan.limits, plan.window)
    cost = fitted.predict(work) + fitted.terms.get("fixed", 0.0) * (n - 1)
    if cost > VALIDATE_BUDGET_S:
        out.worst_note = (f"not formed: its requests prefill {run.prefill_tokens:,} tokens, "
                          f"~{_duration(cost)} at the fitted cost, over the {_duration(VALIDATE_BUDGET_S)} "
                          "budget (a smaller --max-model-len or --max-num-seqs forms it)")
        return
    if progress:
        progress(f"{ep.short}: forming the worst step ({worst.describe()}; ~{_duration(cost)})")
    steps = _run_one(engine, run, 99)
    out.runs[WORST] = steps
    formed = [(s, t) for s, t in _samples(steps)]
    if not formed:
        out.worst_note = "not formed: the engine recorded no finished step"
        return
    out.worst_formed = max(formed, key=lambda p: fitted.predict(p[0]))


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def size(
    plan: SizingPlan, headroom: float, deadline_s: float, progress: Progress | None = None
) -> dict[str, Any]:
    """Measure every engine of ``plan`` (one at a time), fit, bound the worst step, advise."""
    measured = []
    reaper = Reaper()
    scratch = tempfile.mkdtemp(prefix="enginedead-slices-")
    if progress:  # before any engine starts: what each needs, one at a time
        for ep in plan.engines:
            progress(f"{ep.label}: needs {ep.memory.describe()}")
    try:
        for ep in plan.engines:
            model_dir = plan.model
            if ep.depth is not None:
                model_dir = slices.write_slice(plan.config, ep.depth, scratch)
                _link_tokenizer(plan.model, model_dir)
            measured.append(_measure_engine(plan, ep, model_dir, progress, reaper))
    finally:
        reaper.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return sizing_result(plan, measured, headroom, deadline_s)


def _link_tokenizer(model: str, directory: str) -> None:
    """A slice keeps the model's tokenizer files (not needed for token-id prompts, kept for servers)."""
    for name in os.listdir(model):
        if name != "config.json" and name.endswith(".json"):
            with contextlib.suppress(OSError):
                os.symlink(os.path.join(os.path.abspath(model), name), os.path.join(directory, name))


def sizing_result(plan: SizingPlan, measured: Sequence[Measured], headroom: float,
                  deadline_s: float) -> dict[str, Any]:
    """The numbers the command prints and its JSON carries (pure, given what was measured)."""
    fc = _fit_of(plan, measured)
    fitted = fc.fit
    adv = advice.advise(fitted, plan.limits, plan.window, headroom, deadline_s)
    worst_step = adv.worst.step(plan.window)
    worst: dict[str, Any] = {
        **worst_step.as_dict(), "plan": adv.worst.as_dict(), "predicted_s": adv.worst_s, "measured_s": None,
        "stock_fires": adv.worst_s > STOCK_DEADLINE_S, "forecast": plan.forecast,
    }
    main = measured[-1]
    if plan.validate_note:
        worst["note"] = plan.validate_note
    elif main.worst_formed is not None:
        shape, seconds = main.worst_formed
        worst["measured_s"] = seconds
        worst["formed"] = {**shape.as_dict(), "measured_s": seconds, "predicted_s": fitted.predict(shape)}
    elif plan.validate:
        worst["note"] = main.worst_note
    else:
        worst["note"] = "not formed (--no-validate)"
    if plan.forecast:
        worst["note"] = "a forecast: the full-depth model was not run"
    out: dict[str, Any] = {
        "vllm": compat.installed_version(),
        "model": plan.model,
        "machine": report.machine(),
        "limits": plan.limits.as_dict(),
        "layout": {"layers": plan.layout.depth, "sliding_window": plan.window,
                   "layer_types": {t: plan.layout.count(t) for t in plan.layout.types}},
        "headroom": headroom,
        "fit": {**fitted.as_dict(), "context_terms_tied": fc.tied},
        "worst_step": worst,
        "recommend": adv.as_dict(),
        "results": _rows(plan, measured, fitted, adv, headroom),
        "engines": [{"label": m.plan.label, "depth": m.plan.depth, "start_s": m.start_s,
                     "memory_bytes": m.plan.memory.total, "kv_cache_gib": m.plan.kv_cache_gib,
                     "steps": sum(len(v) for v in m.runs.values())} for m in measured],
    }
    if plan.forecast:
        out["forecast"] = fc.as_dict(plan.layout)
    return out


#: batch sizes the table answers for, beside those measured (the report's question)
REPORT_BATCHES = (8, 64, 128)


def _rows(plan: SizingPlan, measured: Sequence[Measured], fitted: fit_.Fit, adv: advice.Advice,
          headroom: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def judge(row: dict[str, Any], seconds: float) -> dict[str, Any]:
        row["stock_fires"] = seconds > STOCK_DEADLINE_S
        row["recommended_s"] = float(max(STOCK_DEADLINE_S, math.ceil(headroom * seconds)))
        return row

    if not plan.forecast:
        for n in plan.batch_sizes:
            steps = [s for s in measured[-1].runs.get(f"decode batch {n}", [])
                     if s.seconds is not None and s.batch_size == n and s.tokens == n]
            times = [s.seconds for s in steps if s.seconds is not None]
            if not times:
                continue
            shape = _to_step(steps[len(steps) // 2])
            ctx = round(shape.context_tokens / n) if shape else 0
            rows.append(judge({
                "batch_size": n, "context_tokens": ctx, "steps": len(times),
                "p50_s": statistics.median(times), "p99_s": _quantile(times, 0.99), "max_s": max(times),
                "predicted_s": fitted.predict(shape) if shape else None, "measured": True, "forecast": False,
            }, max(times)))
    top = max(1, plan.limits.max_model_len - 1)
    contexts = sorted({min(1024, top), top})
    batches = sorted({n for n in (*REPORT_BATCHES, *plan.batch_sizes, plan.limits.max_num_seqs)
                      if n <= plan.limits.max_num_seqs})
    for ctx in contexts:
        for n in batches:
            decode = shapes.StepPlan(n, ctx).step(plan.window)
            seconds = fitted.predict(decode)
            rows.append(judge({
                "batch_size": n, "context_tokens": ctx, "steps": 0, "p50_s": seconds, "p99_s": seconds,
                "max_s": seconds, "predicted_s": seconds, "measured": False, "forecast": plan.forecast,
            }, seconds))
    return rows


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 100:
        return f"{seconds:,.0f} s"
    return f"{seconds:.3g} s"


def format_sizing(out: dict[str, Any]) -> str:
    """What a person reads: the fit, the table, the worst step, what to set."""
    lim, fit, worst, rec = out["limits"], out["fit"], out["worst_step"], out["recommend"]
    stock = rec["deadline_in_force_s"]
    name = os.path.basename(str(out.get("model", "")).rstrip("/"))
    m = out.get("machine", {})
    cores, mem = m.get("cores"), (m.get("memory_bytes") or 0) / slices.GIB
    lines = [
        f"{name} on vLLM {out.get('vllm')}, this machine ({cores} cores, {mem:.0f} GiB): "
        f"--max-num-seqs {lim['max_num_seqs']} --max-num-batched-tokens {lim['max_num_batched_tokens']} "
        f"--max-model-len {lim['max_model_len']}"
        + (f" --kv-cache-tokens {lim['kv_cache_tokens']}" if lim.get("kv_cache_tokens") else ""),
    ]
    if "forecast" in out:
        f = out["forecast"]
        dep = f["depth_independent"]
        lines.append(f"forecast to {out['layout']['layers']} layers from depth slices: depth-independent "
                     f"{dep['fixed_s']:.4g} s + {dep['per_seq_s']:.4g} s/seq + "
                     f"{dep['per_token_s']:.4g} s/token; per layer:")
        for kind, t in f["per_layer"].items():
            lines.append(f"  {kind:<24} {t['fixed_s']:.4g} s + {t['per_token_s']:.4g} s/token + "
                         f"{t['per_context_token_s']:.4g} s/context token")
        if f["context_terms_tied"]:
            lines.append("  (the layer types' context terms are tied by their attention work per key: "
                         "the measured contexts could not tell them apart)")
    worst_at = fit.get("worst_residual_step") or {}
    lines.append(f"step model ({fit['origin']}, {fit['steps']} steps in {fit['groups']} groups; worst "
                 f"residual {fit['worst_residual'] * 100:.0f} % at {worst_at.get('seqs')} seqs, "
                 f"{worst_at.get('tokens')} tokens, {worst_at.get('context_tokens')} context tokens):")
    for term, value in fit["terms"].items():
        key = term.removesuffix("_s")
        lines.append(f"  {key:<25} {value:10.4g}  {fit_.TERM_UNITS.get(key, '')}")
    head = f"stock {stock:g} s"
    lines.append(f"{'batch':>5}  {'context':>7}  {'measured p50':>12}  {'model':>9}  {head:>12}")
    for r in out["results"]:
        measured = _s(r["p50_s"]) if r["measured"] else ("forecast" if r["forecast"] else "-")
        fires = "FIRES" if r["stock_fires"] else "ok"
        lines.append(f"{r['batch_size']:>5}  {r['context_tokens']:>7}  {measured:>12}  "
                     f"{_s(r['predicted_s']):>9}  {fires:>12}")
    if worst["predicted_s"] > stock:
        verdict = f"the {stock:g} s deadline FIRES"
    elif rec["worst_step_fits_deadline"]:
        verdict = f"under {stock:g} s with headroom {rec['headroom']:g}"
    else:
        verdict = f"under {stock:g} s, but not with headroom {rec['headroom']:g}"
    lines.append(f"worst step the scheduler can form: {shapes.StepPlan.from_dict(worst['plan']).describe()} "
                 f"({worst['seqs']} seqs, {worst['tokens']} tokens, "
                 f"{worst['context_tokens']:,} context tokens)")
    measured_text = (f"measured {_s(worst['measured_s'])} (formed: {worst['formed']['seqs']} seqs, "
                     f"{worst['formed']['tokens']} tokens, "
                     f"{worst['formed']['context_tokens']:,} context tokens; "
                     f"the model says {_s(worst['formed']['predicted_s'])})"
                     if worst.get("formed") else worst.get("note", ""))
    lines.append(f"  predicted {_s(worst['predicted_s'])}; {measured_text}; {verdict}")
    lines.append("what to set:")
    lines.append(f"  {rec['export']}    (headroom {rec['headroom']:g} x the worst step)")
    if rec["worst_step_fits_deadline"]:
        lines.append(f"  or keep {stock:g} s: these limits already stay under it")
    elif rec["flags"]:
        lines.append(f"  or keep {stock:g} s and serve with: {rec['flags']}")
    else:
        lines.append(f"  or keep {stock:g} s: no --max-num-seqs / --max-num-batched-tokens keep "
                     f"--max-model-len {lim['max_model_len']} under it")
    largest = []
    if rec["max_num_seqs_under_deadline"] is not None:
        largest.append(f"--max-num-seqs {rec['max_num_seqs_under_deadline']} "
                       f"(at {lim['max_num_batched_tokens']} tokens)")
    if rec["max_num_batched_tokens_under_deadline"] is not None:
        largest.append(f"--max-num-batched-tokens {rec['max_num_batched_tokens_under_deadline']} "
                       f"(at {lim['max_num_seqs']} seqs)")
    if rec.get("max_model_len_under_deadline") is not None:
        largest.append(f"--max-model-len {rec['max_model_len_under_deadline']} (at both)")
    lines.append(f"  the largest whose worst step x {rec['headroom']:g} stays under {stock:g} s: "
                 + (", ".join(largest) or "none"))
    lines.append(f"  guard cap (ENGINEDEAD_GUARD_POLICY=module:POLICY): {rec['policy']['python']}")
    return "\n".join(lines)


def plot_sizing(dest: Output | str, out: dict[str, Any]) -> None:
    """Step time against sequences, one line per context (the model), measured points, deadlines.

    Drawn in memory and written through the one writer (``outputs``), like ``plot``.
    """
    target = dest if isinstance(dest, Output) else claim(dest, repr(dest))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'pytest-enginedead[plot]'") from None
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    rows = out["results"]
    contexts = sorted({r["context_tokens"] for r in rows if not r["measured"]})
    terms = {k.removesuffix("_s"): v for k, v in out["fit"]["terms"].items()}
    model = fit_.Fit(terms)
    window = out["layout"]["sliding_window"]
    top = out["limits"]["max_num_seqs"]
    xs = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, top} & set(range(1, top + 1)) | {top})
    for ctx in contexts:
        ys = [model.predict(shapes.StepPlan(n, ctx).step(window)) for n in xs]
        ax.plot(xs, ys, "-", label=f"model, decodes at {ctx} tokens of context")
    measured = [r for r in rows if r["measured"]]
    if measured:
        ax.plot([r["batch_size"] for r in measured], [r["p50_s"] for r in measured], "o", color="black",
                label="measured decode steps (p50)")
    lim = out["limits"]
    heaviest = [advice.worst_time(model, shapes.Limits(n, max(n, lim["max_num_batched_tokens"]),
                                                       lim["max_model_len"], lim.get("kv_cache_tokens")),
                                  window)[1] for n in xs]
    ax.plot(xs, heaviest, "--", color="purple", label=f"worst step at each --max-num-seqs "
            f"({lim['max_num_batched_tokens']} tokens)")
    worst = out["worst_step"]
    ax.plot([worst["seqs"]], [worst["predicted_s"]], "*", markersize=12, color="purple",
            label="worst step the scheduler can form (model)")
    if worst.get("measured_s") is not None:
        ax.plot([worst["formed"]["seqs"]], [worst["measured_s"]], "P", markersize=10, color="purple",
                label="worst step, formed and measured")
    rec = out["recommend"]
    ax.axhline(rec["deadline_in_force_s"], color="red", linestyle=":",
               label=f"deadline in force ({rec['deadline_in_force_s']:g} s)")
    ax.axhline(rec["deadline_s"], color="green", linestyle="--", label=f"recommended ({rec['deadline_s']} s)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequences in the step")
    ax.set_ylabel("seconds")
    what = "forecast" if "forecast" in out else "measured and fitted"
    ax.set_title(f"enginedead calibrate: {os.path.basename(str(out.get('model', '')).rstrip('/'))} ({what})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    drawn = io.BytesIO()
    fig.savefig(drawn, format=os.path.splitext(target.path)[1].lstrip(".").lower() or None)
    plt.close(fig)
    target.write_bytes(drawn.getvalue())
