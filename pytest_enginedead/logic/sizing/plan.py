"""What a sizing run needs: the runs to measure, the engines (model or depth slices), their memory.

Everything that cannot work is refused here, before any engine starts (``SizingRefused``).

Measure only what the fit needs: the context terms are per layer, so a forecast measures
its runs at long context (the long prompt, the ladder: most of a run's time) on its
shallowest slice alone, and the decodes past ``runs.DEPTH_BATCH`` there too; every slice
measures the short runs that tell the depth terms apart (decodes of 1 and 8, a short prefill).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..inputs.modelconfig import model_name
from ..machine import meminfo
from . import runs as runs_
from . import shapes, slices
from .kvcache import KvCache
from .runs import Run

#: the shortest max_model_len an engine starts with (its runs may need less: a slice that measures only
#: the short runs), so that no model's sliding window or block size meets a context shorter than vLLM plans
SHORTEST_ENGINE_LEN = 512


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
    #: the runs measured on this engine, in order (the fit's; then any held out from it)
    runs: tuple[Run, ...] = ()
    #: runs measured and kept out of the fit, to check the fit against (``bench/sizing.py validate``)
    held_out: tuple[Run, ...] = ()

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
    runs: list[Run]
    engines: list[EnginePlan]
    batch_sizes: tuple[int, ...]
    steps: int
    validate: bool
    #: why the worst step will not be formed, when it will not (and --no-validate did not say so)
    validate_note: str | None = None
    #: tensor-parallel ranks of every engine measured (``--tensor-parallel-size``)
    tensor_parallel: int = 1
    #: the KV cache the server will have (None: it never binds)
    kv: KvCache | None = None
    #: the longest context measured (the context run's prompt)
    longest: int = 0

    @property
    def window(self) -> int | None:
        return self.layout.window if self.layout.has_sliding else None

    @property
    def forecast(self) -> bool:
        return any(e.depth is not None for e in self.engines)


def default_limits(model: str) -> tuple[dict[str, Any], int | None]:
    """The model's config and the longest max_model_len vLLM derives from it."""
    from ..inputs.modelconfig import read_config

    config = read_config(Path(model) / "config.json")
    return config, shapes.model_max_len(config)


@dataclass(frozen=True)
class _Request:
    """What the caller asked for, as ``plan_sizing`` reads it."""

    model: str
    config: dict[str, Any]
    layout: slices.Layout
    limits: shapes.Limits
    runs: list[Run]
    held_out: tuple[Run, ...]
    validate: bool
    available: int


def plan_sizing(
    model: str,
    limits: shapes.Limits,
    batch_sizes: Sequence[int] | None = None,
    steps: int | None = None,
    forecast_depths: Sequence[int] | None = None,
    validate: bool = True,
    available_bytes: int | None = None,
    tensor_parallel: int = 1,
    server_kv: KvCache | None = None,
    longest_context: int = runs_.LONG_CONTEXT,
    held_out: Sequence[Run] = (),
) -> SizingPlan:
    """The runs, the engines and what each needs; ``SizingRefused`` for what cannot work.

    ``held_out``: runs measured on the model itself after the fit's, never fitted (a forecast's
    engines are slices: they are not measured there).
    """
    config, lay = _config(model)
    forecast = bool(forecast_depths)
    sizes = tuple(batch_sizes) if batch_sizes else runs_.default_batch_sizes(limits, forecast)
    too_big = [n for n in sizes if n > limits.max_num_seqs]
    if too_big:
        raise SizingRefused(f"--batch-sizes {','.join(map(str, too_big))} exceed --max-num-seqs "
                            f"{limits.max_num_seqs}: vLLM would not schedule that many")
    n_steps = steps or runs_.SIZING_STEPS
    window = lay.window if lay.has_sliding else None
    fit_runs = runs_.fit_runs(limits, window, sizes, n_steps, longest_context)
    available = meminfo("MemAvailable") if available_bytes is None else available_bytes
    validate, note = _validate(config, limits, validate, forecast, available)
    request = _Request(model, config, lay, limits, fit_runs, tuple(held_out), validate, available)
    if forecast:
        assert forecast_depths is not None
        engines = _slice_engines(request, forecast_depths)
    else:
        engines = [_engine(request, config, None, list(fit_runs))]
    _refuse_memory(engines, model, available)
    longest = runs_.context_length(limits, window, n_steps, longest_context)
    return SizingPlan(model, config, lay, limits, fit_runs, engines, sizes, n_steps, validate, note,
                      tensor_parallel, server_kv, longest)


def _config(model: str) -> tuple[dict[str, Any], slices.Layout]:
    from ..inputs.modelconfig import read_config

    config = read_config(Path(model) / "config.json")
    where = os.path.join(os.path.basename(model.rstrip("/")), "config.json")
    try:
        return config, slices.layout(config, where)
    except slices.SliceError as exc:
        raise SizingRefused(str(exc)) from None


def _validate(config: dict[str, Any], limits: shapes.Limits, validate: bool, forecast: bool,
              available: int) -> tuple[bool, str | None]:
    """Whether the worst step will be formed on the engine, and why not when it will not."""
    if validate and forecast:
        return False, "a forecast: the full-depth model is not run"
    if validate:  # forming the worst step needs every sequence's KV cache at max_model_len
        held = [limits.max_model_len] * limits.max_num_seqs
        need = slices.memory(config, slices.kv_cache_gib(config, held))
        if need.total > available:
            return False, (f"not formed: every sequence at max_model_len needs {need.describe()}, "
                           f"over the {available / slices.GIB:.1f} GiB available")
    return validate, None


def _slice_engines(request: _Request, depths: Sequence[int]) -> list[EnginePlan]:
    """One engine per slice depth; the runs at long context on the shallowest alone."""
    problem = slices.slice_depths_problem(request.layout, depths)
    if problem:
        raise SizingRefused(f"--forecast-layers {','.join(map(str, depths))}: {problem}")
    engines = []
    for i, k in enumerate(sorted(set(depths))):
        try:
            sliced = slices.slice_config(request.config, k)
        except slices.SliceError as exc:
            raise SizingRefused(f"--forecast-layers: {exc}") from None
        measured = [r for r in request.runs if i == 0 or r.every_slice]
        engines.append(_engine(request, sliced, k, measured))
    return engines


def _engine(request: _Request, config: dict[str, Any], depth: int | None, measured: list[Run]) -> EnginePlan:
    """The engine for ``measured`` runs (and on the model itself the held-out ones): limits and cache."""
    held = request.held_out if depth is None else ()
    every = [*measured, *held]
    lim = request.limits
    longest = max(max(r.longest for r in every) + 2, SHORTEST_ENGINE_LEN)
    engine_len = lim.max_model_len if request.validate else min(lim.max_model_len, longest)
    seqs = lim.max_num_seqs if request.validate else max(r.seqs for r in every)
    engine_limits = shapes.Limits(max(1, min(seqs, lim.max_num_seqs)), lim.max_num_batched_tokens, engine_len)
    contexts = [engine_len] * engine_limits.max_num_seqs if request.validate else _run_contexts(every)
    lay = slices.layout(config)
    kv = slices.kv_cache_gib(config, contexts)
    label = f"model ({lay.describe()})" if depth is None else f"slice {depth} ({lay.describe()})"
    memory = slices.memory(config, kv)
    return EnginePlan(label, config, lay, depth, engine_limits, kv, memory, tuple(measured), held)


def _refuse_memory(engines: Sequence[EnginePlan], model: str, available: int) -> None:
    for e in engines:
        if e.memory.total > available:
            what = f"--forecast-layers: {e.label}" if e.depth is not None else f"--model {model_name(model)}"
            hint = "" if e.depth is not None else "; measure depth slices instead, e.g. --forecast-layers 1,2"
            raise SizingRefused(
                f"{what} needs {e.memory.describe()}, and this machine has "
                f"{available / slices.GIB:.1f} GiB available{hint}"
            )


def _run_contexts(runs: Sequence[Run]) -> list[int]:
    """The contexts of the requests of the run that holds the most KV cache at once."""
    heaviest = max(runs, key=lambda r: sum(p + w.max_tokens for w in r.waves for p in w.prompts))
    return [p + w.max_tokens for w in heaviest.waves for p in w.prompts]
