"""How large a batch a harness engine can run: what vLLM will take, and what this machine holds.

The harness starts an engine with ``max_num_seqs`` = the batch size.  vLLM refuses
``max_num_seqs`` above ``max_num_batched_tokens`` when it builds the engine
(``SchedulerConfig``, 0.27.1-0.32.0), and the harness leaves ``max_num_batched_tokens`` at
vLLM's default for the kind of engine (``vllm.LLM``: 4096, the API server: 2048, on CPU, per
rank) unless the engine arguments give one.  The memory: the model's weights, the KV cache
the harness gives an engine of that batch (``slices.kv_cache_bytes``: what its sequences fill,
at most 1 GiB) and the runtime, against what the machine has available.

Pure: the config and the memory available are handed in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import shapes, slices


@dataclass(frozen=True)
class Bound:
    """The largest batch size an engine takes, and why: what a refusal says."""

    largest: int
    why: str

    def problem(self, batch_size: int, said: str | None = None) -> str | None:
        """Why ``batch_size`` cannot run, in one line (``said``: how the caller names it), or None."""
        if batch_size <= self.largest:
            return None
        return f"{said or f'batch size {batch_size}'} is over {self.largest}, {self.why}"


def _whole(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else default


def tokens_bound(server: bool, engine_args: Mapping[str, Any], max_model_len: int) -> Bound:
    """The largest ``max_num_seqs`` vLLM builds with the ``max_num_batched_tokens`` in force: the
    engine arguments', else vLLM's CPU default (``EngineArgs._set_default_args``: per rank, doubled
    in throughput mode, at least ``max_model_len`` without chunked prefill)."""
    kind = "a server" if server else "an offline engine"
    rule = "vLLM refuses max_num_seqs above max_num_batched_tokens"
    given = engine_args.get("max_num_batched_tokens")
    if given is not None:
        tokens = _whole(given, 1)
        return Bound(tokens, f"the largest {kind} with max_num_batched_tokens={given!r} takes: {rule}")
    ranks = (_whole(engine_args.get("tensor_parallel_size"), 1)
             * _whole(engine_args.get("pipeline_parallel_size"), 1))
    tokens = (shapes.SERVER_MAX_NUM_BATCHED_TOKENS if server else shapes.LLM_MAX_NUM_BATCHED_TOKENS) * ranks
    if engine_args.get("performance_mode") == "throughput":
        tokens *= 2
    if engine_args.get("enable_chunked_prefill") is False:
        tokens = max(tokens, max_model_len)
    default = "the CPU API server's" if server else "vllm.LLM's on CPU"
    return Bound(tokens, f"the largest {kind} takes: {rule} ({tokens}, {default} default"
                         f"{f' for {ranks} ranks' if ranks > 1 else ''}; a factory's max_num_batched_tokens= "
                         "raises it)")


def memory_bound(config: Mapping[str, Any], max_model_len: int, available: int) -> Bound | None:
    """The largest batch whose engine this machine holds (weights, the KV cache the harness gives
    it, the runtime), or None when the KV cache's cap keeps every batch within ``available``, or
    when the config cannot be sized."""
    try:
        weights = slices.weight_bytes(config)
        per_sequence = slices.kv_bytes(config, [max_model_len]) * 1.5
    except (slices.SliceError, TypeError, ValueError, ArithmeticError):
        return None
    fixed = weights + slices.RUNTIME_BYTES
    capped = max(slices.KV_CACHE_CAP_BYTES, per_sequence)
    if per_sequence <= 0 or fixed + capped <= available:
        return None
    largest = max(0, math.floor((available - fixed) / per_sequence))
    need = slices.Memory(weights, math.ceil(per_sequence * (largest + 1)))
    held = "one sequence" if largest == 0 else f"{largest + 1} sequences"
    verb = "needs" if largest == 0 else "need"
    return Bound(largest, f"the largest this machine holds: {held} of {max_model_len} tokens {verb} "
                          f"{need.describe()}, over the {available / slices.GIB:.1f} GiB available")
