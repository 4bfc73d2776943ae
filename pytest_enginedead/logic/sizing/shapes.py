"""Which steps vLLM's scheduler can form under a serving configuration, and the heaviest of them.

``Limits`` are vLLM's own serving flags; ``limits_problem`` refuses what vLLM would
refuse.  ``worst_step`` is the heaviest step vLLM's V1 scheduler can form under them
(``vllm/v1/core/sched/scheduler.py``, 0.27.1-0.32.0, read for this):

* running requests first, then waiting ones, first come first served, while the
  token budget (``max_num_batched_tokens``) lasts and fewer than ``max_num_seqs``
  requests run;
* a decode is one token; a request's position never passes ``max_model_len - 1``
  (``num_new_tokens <= max_model_len - num_computed_tokens - 1``), so a token
  attends at most ``max_model_len - 1`` keys;
* a prefill takes ``min(remaining prompt, budget left)`` tokens: every new request
  but the last gets its whole prompt, and only the request cut off last step
  continues mid-prompt — at most one chunk per step starts after computed tokens;
* with the CPU defaults no ``long_prefill_token_threshold`` caps a chunk, and no
  speculative or asynchronous scheduling adds tokens;
* the KV cache bounds the context all running requests hold together (a full
  cache preempts instead of scheduling).

The bound assumes distinct prompts: a prefix-cache hit lets a new request start
after its cached prefix, attending more than the bound gives it.

The requests that make an engine form the steps to measure are ``runs.py``'s.  Pure maths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...contract.steps import attended_keys, read_keys
from ..inputs.modelconfig import model_max_len as model_max_len
from .kvcache import KvCache, Pool, cache_of
from .kvcache import fit_kv as _fit_kv
from .terms import Step

#: vLLM's defaults for the CPU backend (vllm/engine/arg_utils.py, 0.27.1-0.32.0): the
#: OpenAI API server's, which is what users serve with; the ``LLM`` class uses 256 / 4096
SERVER_MAX_NUM_SEQS = 128
SERVER_MAX_NUM_BATCHED_TOKENS = 2048
LLM_MAX_NUM_BATCHED_TOKENS = 4096

@dataclass(frozen=True)
class Limits:
    """The serving limits, by vLLM's flag names; ``kv_cache_tokens`` None = the cache never binds."""

    max_num_seqs: int = SERVER_MAX_NUM_SEQS
    max_num_batched_tokens: int = SERVER_MAX_NUM_BATCHED_TOKENS
    max_model_len: int = 512
    kv_cache_tokens: int | None = None

    def flags(self) -> str:
        return (
            f"--max-num-seqs {self.max_num_seqs} --max-num-batched-tokens "
            f"{self.max_num_batched_tokens} --max-model-len {self.max_model_len}"
        )

    def as_dict(self) -> dict[str, int | None]:
        return {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            "kv_cache_tokens": self.kv_cache_tokens,
        }


def limits_problem(limits: Limits, max_len: int | None, given: Mapping[str, str]) -> str | None:
    """What vLLM would refuse about these limits, in one line naming the flag, or None.

    ``given``: how each flag was set, for the message (``"--max-num-seqs 300"`` or
    ``"vLLM's default 128"``).  The rules are vLLM's own (config/scheduler.py,
    config/model.py, 0.32.0): ``max_num_batched_tokens >= max_num_seqs``;
    ``max_model_len`` at most what the config allows (unless
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``); a KV cache that holds one request of
    ``max_model_len`` tokens.
    """
    seqs, tokens, length = limits.max_num_seqs, limits.max_num_batched_tokens, limits.max_model_len
    if tokens < seqs:
        return (
            f"{given['max_num_batched_tokens']} is below {given['max_num_seqs']}: vLLM refuses "
            f"max_num_batched_tokens ({tokens}) < max_num_seqs ({seqs}); raise the tokens or lower the seqs"
        )
    if max_len is not None and length > max_len:
        return (
            f"{given['max_model_len']} is longer than the model allows ({max_len}, from its config.json): "
            "vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        )
    if limits.kv_cache_tokens is not None and limits.kv_cache_tokens < length:
        return (
            f"{given['kv_cache_tokens']} cannot hold one request of {given['max_model_len']}: vLLM refuses "
            "to start an engine whose KV cache is smaller than max_model_len"
        )
    return None


# --- the steps the scheduler can form -----------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """Prefill tokens of ``count`` requests in one step: ``tokens`` each, after ``offset`` computed ones."""

    tokens: int
    offset: int = 0
    count: int = 1


@dataclass(frozen=True)
class StepPlan:
    """A step's composition: decodes at a context (keys each attends) and prefill chunks."""

    decodes: int
    decode_context: int
    chunks: tuple[Chunk, ...] = ()

    def step(self, window: int | None) -> Step:
        tokens = self.decodes + sum(c.tokens * c.count for c in self.chunks)
        full = self.decodes * self.decode_context + sum(
            c.count * attended_keys(c.offset + 1, c.offset + c.tokens) for c in self.chunks
        )
        capped = self.decodes * (self.decode_context if window is None else min(self.decode_context, window))
        capped += sum(c.count * attended_keys(c.offset + 1, c.offset + c.tokens, window) for c in self.chunks)
        read = self.decodes * self.decode_context + sum(c.count * (c.offset + c.tokens) for c in self.chunks)
        read_capped = self.decodes * read_keys(self.decode_context, 1, window) + sum(
            c.count * read_keys(c.offset + c.tokens, c.tokens, window) for c in self.chunks)
        seqs = self.decodes + sum(c.count for c in self.chunks)
        return Step(seqs, tokens, full, capped if window is not None else full, read,
                    read_capped if window is not None else read)

    @property
    def context_held(self) -> int:
        """KV cache the step's requests hold once it has run."""
        return self.decodes * self.decode_context + sum((c.offset + c.tokens) * c.count for c in self.chunks)

    def describe(self) -> str:
        parts = []
        if self.decodes:
            parts.append(f"{self.decodes} decodes at {self.decode_context} tokens of context")
        whole: dict[int, int] = {}
        for c in self.chunks:
            if c.offset:
                parts.append(f"a {c.tokens}-token prefill chunk after {c.offset} tokens")
            else:
                whole[c.tokens] = whole.get(c.tokens, 0) + c.count
        for tokens, count in whole.items():
            parts.append(f"{count} new prompt{'s' if count > 1 else ''} of {tokens} tokens")
        return " + ".join(parts) or "nothing"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepPlan:
        chunks = tuple(
            Chunk(int(c["tokens"]), int(c["offset"]), int(c.get("count", 1))) for c in data["chunks"]
        )
        return cls(int(data["decodes"]), int(data["decode_context"]), chunks)

    def as_dict(self) -> dict[str, object]:
        return {
            "decodes": self.decodes,
            "decode_context": self.decode_context,
            "chunks": [{"tokens": c.tokens, "offset": c.offset, "count": c.count} for c in self.chunks],
            "described": self.describe(),
        }


def worst_step(limits: Limits, window: int | None, cost: Callable[[Step], float],
               kv: KvCache | None = None) -> StepPlan:
    """The heaviest step the scheduler can form under ``limits``, by the cost model ``cost``.

    The candidates are every split the scheduler allows: ``d`` running decodes at the
    longest context, the request cut off last step continuing to the end of a
    ``max_model_len`` prompt with the budget left (at most ``max_model_len - 1``
    tokens), and with what budget and seats remain, ``m`` new prompts (each at most
    ``max_model_len - 1`` tokens, as long as possible).  The KV cache (``kv``, else
    ``limits.kv_cache_tokens`` counted in tokens) shortens the decodes' context first (a
    chunk's context is attended by each of its tokens, a decode's by one), then their number.
    """
    seqs, budget, length = limits.max_num_seqs, limits.max_num_batched_tokens, limits.max_model_len
    top = max(1, length - 1)  # keys the last position attends
    pool = cache_of(limits, kv)
    plans = [_fit_kv(StepPlan(min(seqs, budget), top), pool)]
    for m in range(0, seqs):
        d = seqs - 1 - m
        left = budget - d
        if left < 1 + m:
            break
        first = min(top, left - m)
        chunks = [Chunk(first, top - first)]
        rest = left - first
        whole, part = min(m, rest // top), 0
        if whole < m and rest - whole * top > 0:
            part = rest - whole * top
        if whole:
            chunks.append(Chunk(top, 0, whole))
        if part:
            chunks.append(Chunk(part, 0))
        plans.append(_fit_kv(StepPlan(d, top, tuple(chunks)), pool))
        if whole + (1 if part else 0) < m:  # seats left empty: more new prompts cannot help
            break
    feasible = [p for p in plans if p is not None]
    if not feasible:  # a KV cache too small even for one decode: vLLM refuses such limits
        return StepPlan(1, 1)
    return max(feasible, key=lambda p: (cost(p.step(window)), p.step(window).tokens))


def binding(plan: StepPlan, limits: Limits, window: int | None, pool: Pool | None) -> list[str]:
    """Which limits the heaviest step reaches: vLLM's flags by name, and ``kv_cache``."""
    step = plan.step(window)
    top = max(1, limits.max_model_len - 1)
    out = []
    if step.seqs >= limits.max_num_seqs:
        out.append("max_num_seqs")
    if step.tokens >= limits.max_num_batched_tokens:
        out.append("max_num_batched_tokens")
    at_top = (plan.decodes and plan.decode_context >= top) or any(
        c.offset + c.tokens >= top for c in plan.chunks)
    if at_top:
        out.append("max_model_len")
    cut = plan.decodes and plan.decode_context < top
    if pool is not None and (cut or pool.held(plan) > 0.98 * pool.bytes):
        out.append("kv_cache")
    return out
