"""Which steps a serving configuration can form, and which ones to form to measure it.

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

``fit_runs`` and ``worst_run`` are the requests to send so that the engine forms the
steps the fit needs and the worst step itself.  Pure maths; the engine work is
``calibration.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...contract.steps import attended_keys, read_keys
from ..inputs.modelconfig import model_max_len as model_max_len
from .fit import Step
from .kvcache import BLOCK_TOKENS, KvCache, Pool, cache_of
from .kvcache import fit_kv as _fit_kv

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


# --- what to send: the runs that form the steps ----------------------------------------


@dataclass(frozen=True)
class Wave:
    """Requests sent together: one prompt length each, all decoding ``max_tokens`` tokens.

    The first ``prefix`` tokens of the wave's first prompt are those of the run's first
    prompt (a prefix-cache hit, so that its chunk starts after computed tokens).  The
    first ``shared`` tokens of every prompt are those of the engine's long prompt (the
    context run's): a prompt that is all of it is prefilled; one that goes on past it finds
    it in the prefix cache and decodes at long context after a short prefill.
    """

    prompts: tuple[int, ...]
    max_tokens: int
    prefix: int = 0
    shared: int = 0

    def cached(self, i: int) -> int:
        """Tokens of prompt ``i`` expected from the prefix cache."""
        p = self.prompts[i]
        if self.shared and self.shared < p:
            return self.shared // BLOCK_TOKENS * BLOCK_TOKENS
        return self.prefix if i == 0 else 0


@dataclass(frozen=True)
class Run:
    """Waves of requests; each wave is sent once every request before it has its first token."""

    name: str
    waves: tuple[Wave, ...]

    @property
    def seqs(self) -> int:
        return sum(len(w.prompts) for w in self.waves)

    @property
    def longest(self) -> int:
        return max(p + w.max_tokens for w in self.waves for p in w.prompts)

    @property
    def prefill_tokens(self) -> int:
        return sum(p - w.cached(i) for w in self.waves for i, p in enumerate(w.prompts))


#: decode steps measured per batch size when ``--steps`` is not given
SIZING_STEPS = 4
#: decodes running beside the long prompt of the context run (its mixed steps)
MIXED_DECODES = 8
#: sequences and prompt length of the short-prefill run
PREFILL_SEQS, PREFILL_LEN = 8, 16
#: the longest context measured (the context run's prompt), when the model's length allows: 16x
#: the shortest of the ladder (``LADDER``), and what a depth slice prefills in a minute or two
LONG_CONTEXT = 16384
#: the ladder of decode contexts, as fractions of the longest: a factor 32 between its ends (16 and
#: more once each decode's few tokens of its own are counted)
LADDER = (32, 4, 1)
#: sequences decoding at each rung, and the tokens that make their prompts distinct
LADDER_SEQS, LADDER_TAIL = 8, 8


def context_length(limits: Limits, window: int | None, steps: int, longest: int = LONG_CONTEXT) -> int:
    """The long prompt of the context run: ``longest`` (at least twice the window), as the model's
    length allows, in whole KV blocks.

    Its prefill chunks attend from one chunk's keys to the whole context (a factor 16 and
    more), and the ladder's decodes read from 1/32 of it to all of it: the context terms
    measured where they are large, not carried from a short context.
    """
    want = max(longest, 2 * window) if window else longest
    room = limits.max_model_len - steps - 2 - LADDER_TAIL
    ctx = min(want, room)
    return max(1, ctx // BLOCK_TOKENS * BLOCK_TOKENS if ctx >= 4 * BLOCK_TOKENS else ctx)


def ladder(longest: int) -> list[int]:
    """The decode contexts of the ladder: 1/32, 1/4 and all of the longest (in whole blocks where
    it is long enough to have them)."""
    out = []
    for part in LADDER:
        c = longest // part
        if c >= 4 * BLOCK_TOKENS:
            c = c // BLOCK_TOKENS * BLOCK_TOKENS
        out.append(max(1, c))
    return sorted(set(out))


def default_batch_sizes(limits: Limits, forecast: bool) -> tuple[int, ...]:
    """Decode batches at short context: 1, 8, 32 and (on the model itself) ``max_num_seqs``."""
    sizes = [1, 8, 32] + ([] if forecast else [limits.max_num_seqs])
    return tuple(sorted({n for n in sizes if n <= limits.max_num_seqs}))


def fit_runs(limits: Limits, window: int | None, batch_sizes: Sequence[int], steps: int,
             longest: int = LONG_CONTEXT) -> list[Run]:
    """The runs the fit is measured on: cheap, and each term seen where it is large.

    * decode batches at short context (one-token prompts): the fixed and per-sequence
      terms;
    * a short prefill (8 prompts of 16 tokens): tokens without sequences or context;
    * the context run: a few short decodes running, then one long prompt (``longest``
      tokens, as the limits allow) — its prefill chunks beside the decodes attend from
      one chunk's keys to the whole context: the keys attended, a factor 16 apart;
    * the ladder: ``LADDER_SEQS`` decodes at 1/32, 1/4 and all of that context, their
      prompts going on past the long prompt (found in the prefix cache): the keys read,
      a factor 16 apart, for a few tokens of prefill each.
    """
    runs = [Run(f"decode batch {n}", (Wave((1,) * n, steps + 1),)) for n in batch_sizes]
    if limits.max_num_seqs >= PREFILL_SEQS and limits.max_model_len > PREFILL_LEN + 2:
        runs.append(
            Run(f"prefill {PREFILL_SEQS} x {PREFILL_LEN} tokens", (Wave((PREFILL_LEN,) * PREFILL_SEQS, 1),))
        )
    ctx = context_length(limits, window, steps, longest)
    mixed = max(0, min(MIXED_DECODES, limits.max_num_seqs - 1))
    budget = limits.max_num_batched_tokens
    chunk_steps = -(-ctx // max(1, budget - mixed))
    waves = ((Wave((1,) * mixed, chunk_steps + steps + 2),) if mixed else ()) + (
        Wave((ctx,), steps + 1, shared=ctx),)
    runs.append(Run(f"context {ctx} beside {mixed} decodes", waves))
    n = min(LADDER_SEQS, limits.max_num_seqs)
    for c in ladder(ctx):
        if c + LADDER_TAIL + steps + 1 <= limits.max_model_len:
            runs.append(Run(f"{n} decodes at {c} tokens of context",
                            (Wave((c + LADDER_TAIL,) * n, steps + 1, shared=c),)))
    return runs


def worst_run(plan: StepPlan, limits: Limits) -> Run:
    """The requests that make the engine form ``plan``: decodes that reach the longest
    context together, then the chunks in the next step.

    The decodes' prompts are prefilled first (chunked over several steps, the first
    ones decoding meanwhile), so each prompt is shorter than the target context by the
    steps that takes; then the continuing chunk's request (its first ``offset`` tokens
    those of a decode's prompt, cached) and the new prompts arrive together.
    """
    budget, d = limits.max_num_batched_tokens, plan.decodes
    lag = 2
    prompt = max(1, plan.decode_context - lag)
    for _ in range(8):  # prefill steps, during which the first decodes run ahead
        lag = 2 + -(-d * prompt // max(1, budget - d // 2))
        prompt = max(1, plan.decode_context - lag)
    waves = []
    if d:
        waves.append(Wave((prompt,) * d, max(1, limits.max_model_len - prompt)))
    mid = [c for c in plan.chunks if c.offset]
    prefix = min(mid[0].offset, prompt) if mid and d else 0
    arriving = tuple(c.offset + c.tokens for c in mid for _ in range(c.count)) + tuple(
        c.tokens for c in plan.chunks if not c.offset for _ in range(c.count)
    )
    if arriving:
        waves.append(Wave(arriving, 1, prefix))
    return Run("worst step", tuple(waves))


def run_work(run: Run, limits: Limits, window: int | None) -> tuple[Step, int]:
    """All a run's steps added together, and about how many steps it takes.

    The cost model is linear, so the sum of its steps' predicted times is the
    prediction of this sum (plus ``fixed`` per step): what a run will cost, before it
    runs.  Prompts are counted whole (chunking does not change the keys a prompt's
    tokens attend); decodes at their prompt's length plus half their tokens.
    """
    budget = limits.max_num_batched_tokens
    seqs = tokens = full = capped = read = read_capped = 0
    steps = 0
    for wave in run.waves:
        prefill = sum(p - wave.cached(i) for i, p in enumerate(wave.prompts))
        wave_steps = -(-prefill // budget) + wave.max_tokens
        steps += wave_steps
        for i, p in enumerate(wave.prompts):
            start = wave.cached(i)
            tokens += p - start
            full += attended_keys(start + 1, p)
            capped += attended_keys(start + 1, p, window)
            read += p
            read_capped += read_keys(p, p - start, window)
            decodes = max(0, min(wave.max_tokens, limits.max_model_len - p) - 1)
            seqs += 1 + decodes
            tokens += decodes
            mid = p + decodes // 2
            full += decodes * mid
            capped += decodes * (mid if window is None else min(mid, window))
            read += decodes * mid
            read_capped += decodes * read_keys(mid, 1, window)
    return Step(seqs, tokens, full, capped, read, read_capped), steps
