"""The engines ``enginedead calibrate`` runs: decode steps per batch size, and the sizing runs.

``measure``: decode steps of one-token prompts per batch size, on one engine sized for
the largest.  ``size``: the steps ``sizing.shapes`` asks for, on one engine per model or
depth slice, then the worst step the scheduler can form (formed and measured when
affordable); ``sizing.result`` turns them into the answer.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import statistics
import tempfile
from collections.abc import Sequence
from typing import Any

from ..compat import llm_api, versions
from ..contract.steps import StepTime, one_per_step
from ..logic.planning.engines import DeadlineAndFaults as Instructions
from ..logic.planning.engines import EngineSpec
from ..logic.sizing import runs as runs_
from ..logic.sizing import shapes, slices
from ..logic.sizing.answer import SizingAnswer
from ..logic.sizing.decode import DecodeSteps
from ..logic.sizing.fit import FitError, Step, fit_steps
from ..logic.sizing.plan import EnginePlan, SizingPlan
from ..logic.sizing.result import (
    HELD_OUT,
    WORST,
    Measured,
    duration_text,
    fit_of,
    quantile,
    samples_of,
    sizing_answer,
)
from ..logic.timeouts.policies import Backend, TimeoutPolicy
from .engines.offline import Engine
from .engines.reaper import Reaper
from .waiting import Progress


def measure(
    model: str, batch_sizes: Sequence[int], steps: int, progress: Progress | None = None, rounds: int = 4,
    tensor_parallel: int = 1,
) -> list[DecodeSteps]:
    """Time ``steps`` decode steps per batch size, on one engine sized for the largest.

    Each size is warmed up first (not measured), then the sizes take turns in
    ``rounds`` rounds, the order reversed every other round, so that the machine's
    noise lands on all of them alike.  Prompts are one token, so a round's prefill step
    costs what a decode step of the same batch costs: every step measured is decode-sized.
    """
    sizes = list(batch_sizes)
    largest = max(sizes)
    deadline = TimeoutPolicy.reference().timeout_s(Backend.CPU, largest)
    engine = Engine(EngineSpec(model, largest, tensor_parallel=tensor_parallel), reaper=(reaper := Reaper()))
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
                    seen = len(engine.evidence.steps())
                    engine.generate(n, max_tokens=missing + 2, prompt_len=1)
                    measured[n] += [s.seconds for s in one_per_step(engine.evidence.steps()[seen:])
                                    if s.seconds is not None and s.batch_size == n]
        start_s = engine.start_s
    finally:
        engine.stop()
        reaper.close()
    results = []
    for n in sizes:
        if not measured[n]:
            raise RuntimeError(f"no full decode step at batch {n} was recorded")
        times = measured[n]
        results.append(DecodeSteps(n, len(times), statistics.median(times), quantile(times, 0.99), max(times),
                                   start_s))
    return results


#: forming the worst step is skipped when its requests would take longer than this (the
#: fitted cost of prefilling every decode's context on this machine)
VALIDATE_BUDGET_S = 300.0


#: the seed of the engine's long prompt, which the context run prefills and the ladder's prompts share
BASE_SEED = 4242


def _run_one(engine: Engine, run: runs_.Run, seed: int, base: list[int] | None = None) -> list[StepTime]:
    """Send a run's waves; the steps the engine recorded meanwhile.  ``base``: the engine's long
    prompt, whose first ``wave.shared`` tokens begin every prompt of a wave that shares it."""
    seen = len(engine.evidence.steps())
    first: list[int] | None = None
    waves = []
    for i, wave in enumerate(run.waves):
        prefix = first[: wave.prefix] if first and wave.prefix else None
        prompts = engine.prompts(list(wave.prompts), seed * 100 + i, prefix)
        if wave.shared and base:
            for p in prompts:
                p[: wave.shared] = base[: min(wave.shared, len(p))]
        if first is None and prompts:
            first = prompts[0]
        waves.append((prompts, wave.max_tokens))
    engine.drive(waves)
    return engine.evidence.steps()[seen:]


#: the engine argument that keeps a sliding-window layer's blocks in the prefix cache
RETENTION_ARG = "prefix_cache_retention_interval"


def retention() -> tuple[tuple[str, Any], ...]:
    """Dense prefix-cache retention, where this vLLM has the setting (0.32.0: ``None``; its default 0
    keeps a sliding-window layer's blocks only at a prompt's end).  The ladder's prompts go on past the
    first 256, 2K or 8K tokens of the long prompt: with the default, only the rung at its end found it
    cached, and the others prefilled theirs (8 x 4K tokens: minutes on a slice of the 26B).
    """
    names = llm_api.engine_argument_names()
    return ((RETENTION_ARG, None),) if names is not None and RETENTION_ARG in names else ()


def _measure_engine(plan: SizingPlan, ep: EnginePlan, model_dir: str, progress: Progress | None,
                    reaper: Reaper, repeats: int = 1) -> Measured:
    lim = ep.limits
    args = (("max_model_len", lim.max_model_len), ("max_num_batched_tokens", lim.max_num_batched_tokens))
    spec = EngineSpec(model_dir, lim.max_num_seqs, extra_args=args + retention(),
                      kv_cache_gib=ep.kv_cache_gib, tensor_parallel=plan.tensor_parallel)
    deadline = TimeoutPolicy.reference().timeout_s(Backend.CPU, lim.max_num_seqs, lim.max_num_batched_tokens)
    engine = Engine(spec, reaper=reaper)
    out = Measured(ep, {}, rounds=repeats)
    try:
        engine.start(Instructions(deadline, "sizing (reference policy)"), progress)
        out.start_s = engine.start_s
        engine.drive([(engine.prompts([1, 1], 7), 3)])
        _measure_runs(plan, ep, engine, out, progress, repeats)
        if plan.validate:
            _validate(plan, ep, engine, out, progress)
    finally:
        engine.stop()
    return out


#: a step that takes this long or more is not warmed up: its kernels' building is lost in it (a whole
#: chunk of a large model's slice takes a minute on 2 cores; the first step of a tiny model's 2x the next)
WARM_STEP_S = 10.0


def _twin(out: Measured, run: runs_.Run, budget: int) -> runs_.Run | None:
    """A run's warm-up twin (``runs.warm_up``), or None when the steps this engine measured so far say
    the run's steps are long enough to need none; before any, every run is warmed up."""
    samples = [x for steps in out.runs.values() for x in samples_of(steps)]
    try:
        fitted = fit_steps(samples, ("fixed", "per_seq", "per_token"))
    except FitError:
        return runs_.warm_up(run, budget)
    if not run.long and fitted.predict(runs_.heaviest(run, budget)) >= WARM_STEP_S:
        return None
    twin = runs_.warm_up(run, budget, whole_chunk=fitted.predict(Step(1, budget, 0)) < WARM_STEP_S)
    return twin if twin.waves else None


def _measure_runs(plan: SizingPlan, ep: EnginePlan, engine: Engine, out: Measured, progress: Progress | None,
                  repeats: int) -> None:
    """Each run warmed up (not measured), then measured ``repeats`` times back to back.

    The first step of every shape (tokens in the step) builds its kernels (oneDNN primitives, on CPU)
    and cost up to 2x the next one: a run is warmed up by its cheap twin at short context
    (``runs.warm_up``: a short run's first two steps; a run at long context, its twin at short
    context), unless the steps so far say its steps take ``WARM_STEP_S`` or more, their kernels'
    building lost in them.  The rounds of a run follow each other before the next
    run starts: what else the machine does meanwhile weighs on every round alike.  Each round has its
    own long prompt (nothing cached across rounds), which the ladder's prompts of that round share.
    """
    longest = max([plan.longest, *(w.shared for r in ep.held_out for w in r.waves)])
    bases = [engine.prompts([max(1, longest)], BASE_SEED + rep)[0] for rep in range(1, repeats + 1)]
    every = [(run, False) for run in ep.runs] + [(run, True) for run in ep.held_out]
    for i, (run, held) in enumerate(every):
        twin = _twin(out, run, ep.limits.max_num_batched_tokens)
        if twin is not None:
            if progress:
                progress(f"{ep.short}: warm-up: {run.name}")
            _run_one(engine, twin, i + 1, bases[0])
        for rep, base in enumerate(bases, start=1):
            if progress:
                rounds = f" (round {rep}/{repeats})" if repeats > 1 else ""
                progress(f"{ep.short}: {'held out: ' if held else ''}{run.name}{rounds}")
            steps = _run_one(engine, run, i + 1 + 1000 * rep, base)
            name = f"{HELD_OUT}{run.name}" if held else run.name
            out.runs[name if rep == 1 else f"{name} #{rep}"] = steps


def _validate(
    plan: SizingPlan, ep: EnginePlan, engine: Engine, out: Measured, progress: Progress | None
) -> None:
    """Form the worst step on the engine, if the fit says it is affordable here."""
    fitted = fit_of(plan, [out]).fit
    worst = shapes.worst_step(plan.limits, plan.window, fitted.upper, plan.kv)
    run = runs_.worst_run(worst, plan.limits)
    cost = runs_.run_cost(fitted, run, plan.limits, plan.window)
    if cost > VALIDATE_BUDGET_S:
        out.worst_note = (f"not formed: its requests prefill {run.prefill_tokens:,} tokens, "
                          f"~{duration_text(cost)} at the fitted cost, over the "
                          f"{duration_text(VALIDATE_BUDGET_S)} "
                          "budget (a smaller --max-model-len or --max-num-seqs forms it)")
        return
    if progress:
        progress(f"{ep.short}: forming the worst step ({worst.describe()}; ~{duration_text(cost)})")
    steps = _run_one(engine, run, 99)
    out.runs[WORST] = steps
    formed = samples_of(steps)
    if not formed:
        out.worst_note = "not formed: the engine recorded no finished step"
        return
    out.worst_formed = max(formed, key=lambda p: fitted.predict(p[0]))


def measure_plan(plan: SizingPlan, progress: Progress | None = None, repeats: int = 1) -> list[Measured]:
    """Measure every engine of ``plan``, one at a time: what each recorded."""
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
            measured.append(_measure_engine(plan, ep, model_dir, progress, reaper, repeats))
    finally:
        reaper.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return measured


def size(
    plan: SizingPlan, headroom: float, deadline_s: float, progress: Progress | None = None, repeats: int = 1
) -> SizingAnswer:
    """Measure every engine of ``plan`` (one at a time), fit, bound the worst step, advise."""
    measured = measure_plan(plan, progress, repeats)
    return sizing_answer(plan, measured, headroom, deadline_s, versions.installed_version())


def _link_tokenizer(model: str, directory: str) -> None:
    """A slice keeps the model's tokenizer files (not needed for token-id prompts, kept for servers)."""
    for name in os.listdir(model):
        if name != "config.json" and name.endswith(".json"):
            with contextlib.suppress(OSError):
                os.symlink(os.path.join(os.path.abspath(model), name), os.path.join(directory, name))
