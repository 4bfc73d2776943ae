"""What a sizing run needs: the runs to measure, the engines (model or depth slices), their memory.

Everything that cannot work is refused here, before any engine starts (``SizingRefused``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..inputs.modelconfig import model_name
from ..machine import meminfo
from . import shapes, slices
from .kvcache import KvCache


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
    longest_context: int = shapes.LONG_CONTEXT,
) -> SizingPlan:
    """The runs, the engines and what each needs; ``SizingRefused`` for what cannot work."""
    from ..inputs.modelconfig import read_config

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
    runs = shapes.fit_runs(limits, window, sizes, n_steps, longest_context)
    measured = shapes.context_length(limits, window, n_steps, longest_context)
    longest = max(r.longest for r in runs) + 2
    available = meminfo("MemAvailable") if available_bytes is None else available_bytes
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
            what = f"--forecast-layers: {e.label}" if e.depth is not None else f"--model {model_name(model)}"
            hint = "" if e.depth is not None else "; measure depth slices instead, e.g. --forecast-layers 1,2"
            raise SizingRefused(
                f"{what} needs {e.memory.describe()}, and this machine has "
                f"{available / slices.GIB:.1f} GiB available{hint}"
            )
    return SizingPlan(model, config, lay, limits, runs, engines, sizes, n_steps, validate, note,
                      tensor_parallel, server_kv, measured)


def _run_contexts(runs: Sequence[shapes.Run]) -> list[int]:
    """The contexts of the requests of the run that holds the most KV cache at once."""
    heaviest = max(runs, key=lambda r: sum(p + w.max_tokens for w in r.waves for p in w.prompts))
    return [p + w.max_tokens for w in heaviest.waves for p in w.prompts]
