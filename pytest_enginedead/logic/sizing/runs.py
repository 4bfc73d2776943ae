"""What to send: the requests that make an engine form the steps a sizing run measures.

A ``Run`` is waves of requests (``Wave``), each wave sent once every request before it has
its first token.  ``fit_runs`` are the runs the step model is fitted on (decode batches,
a short prefill, one long prompt and a ladder of decodes at contexts a factor 32 apart);
``worst_run`` forms the heaviest step the scheduler can form (``shapes.worst_step``);
``warm_up`` is the cheap run that builds a run's kernels before it is measured;
``run_work`` / ``run_cost`` what a run costs by a fit before it runs.  Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...contract.steps import attended_keys, read_keys
from .fit import Fit
from .kvcache import BLOCK_TOKENS
from .shapes import Limits, StepPlan
from .terms import Step


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
    #: at long context (the long prompt, the ladder): warmed up by a cheap twin at short context
    long: bool = False
    #: measured on every slice of a forecast (False: on the shallowest only; what tells the depth terms
    #: apart is measured on every slice, what a term per layer needs once)
    every_slice: bool = True

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
#: the longest context measured (the context run's prompt), when the model's length allows: 32x the
#: shortest of the ladder (``LADDER``).  Past the last-level cache a decode's reads cost the same per
#: key at 8K as at 256K, and 8K is what a slice of the 26B prefills in ~5 minutes on 2 AVX2 cores
#: (16K took 11: most of the run); ``bench/sizing.py validate`` checks the forecast at 16K keys
LONG_CONTEXT = 8192
#: the decode batches measured by default.  A decode's cost bends between 1 and 8 sequences (the
#: experts a batch reaches: 8, 14, 22, 29 of 32 at 1, 2, 4, 8 with 8 of 32 picked) and a line through
#: 1, 8 and 32 can be straight where the steps are not: 2 puts one point on the bend
DECODE_BATCHES = (1, 2, 8, 32)
#: the decode batches every slice measures (larger ones: the shallowest only)
DEPTH_BATCH = 8
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
    """The decode contexts of the ladder: 1/32, 1/4 and all of the longest, each of half a KV block
    or more taken to the nearest whole block within the longest.

    A rung's prompts find the long prompt in the prefix cache in whole blocks only, and each of
    the 8 prefills the part of a block it does not find (and its warm-up twin again): a rung
    between whole blocks costs up to 8 blocks of prefill.  A rung under half a block prefills
    less than the one block rounding would take it to."""
    whole = longest // BLOCK_TOKENS * BLOCK_TOKENS
    out = []
    for part in LADDER:
        c = longest // part
        if 2 * c >= BLOCK_TOKENS and whole:  # rounds to one block or more
            c = min(whole, (c + BLOCK_TOKENS // 2) // BLOCK_TOKENS * BLOCK_TOKENS)
        out.append(max(1, c))
    return sorted(set(out))


def decode_name(n: int) -> str:
    """The name of the run that decodes ``n`` one-token prompts at short context, fitted or held out."""
    return f"decode batch {n}"


def default_batch_sizes(limits: Limits, forecast: bool) -> tuple[int, ...]:
    """Decode batches at short context: ``DECODE_BATCHES`` and (on the model itself) ``max_num_seqs``."""
    sizes = [*DECODE_BATCHES] + ([] if forecast else [limits.max_num_seqs])
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
    runs = [Run(decode_name(n), (Wave((1,) * n, steps + 1),), every_slice=n <= DEPTH_BATCH)
            for n in batch_sizes]
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
    runs.append(Run(f"context {ctx} beside {mixed} decodes", waves, long=True, every_slice=False))
    n = min(LADDER_SEQS, limits.max_num_seqs)
    for c in ladder(ctx):
        if c + LADDER_TAIL + steps + 1 <= limits.max_model_len:
            runs.append(Run(f"{n} decodes at {c} tokens of context",
                            (Wave((c + LADDER_TAIL,) * n, steps + 1, shared=c),), long=True,
                            every_slice=False))
    return runs


#: the tokens a warm-up's decodes run for, at most: enough to overlap two prefill chunks
WARM_UP_TOKENS = 6


def warm_up(run: Run, budget: int, whole_chunk: bool = True) -> Run:
    """The cheap twin of a run, measured first and thrown away: the same tokens per step, at short
    context, for few steps, so that the engine builds the kernels the run's steps need (the first step
    of every token count builds its oneDNN primitives, on CPU, and cost up to 2x the next one).

    Decodes run two tokens (the prompts' step and one decode; ``WARM_UP_TOKENS`` beside a long
    prompt, to overlap its chunks); a prompt that goes on past a shared prefix keeps its own tokens
    only (the prefix-cache hit prefills no more); the long prompt is cut to its last, shorter chunk and,
    with ``whole_chunk``, one whole chunk before it (a step long enough that its kernels' building is
    lost in it needs no warming: a whole chunk of a large model's slice takes a minute on 2 cores).
    """
    if not run.long:
        return Run(f"warm-up: {run.name}", tuple(Wave(w.prompts, min(w.max_tokens, 2), w.prefix)
                                                  for w in run.waves))
    waves, running = [], 0
    for wave in run.waves:
        chunk = max(1, budget - running)
        short = (_short_prompt(p, wave.shared, chunk, whole_chunk) for p in wave.prompts)
        prompts = tuple(p for p in short if p)
        if prompts:
            waves.append(Wave(prompts, min(wave.max_tokens, WARM_UP_TOKENS)))
        running += len(wave.prompts)
    return Run(f"warm-up: {run.name}", tuple(waves))


def _short_prompt(prompt: int, shared: int, chunk: int, whole_chunk: bool) -> int:
    """A twin's prompt: the tokens past a cached prefix, or a long prompt's last chunk (and one whole
    before it); 0 when nothing is left to warm (a long prompt of whole chunks, whole ones not wanted)."""
    if shared and shared < prompt:
        return prompt - shared // BLOCK_TOKENS * BLOCK_TOKENS
    if prompt > chunk:
        return (chunk if whole_chunk else 0) + (prompt % chunk or (chunk if whole_chunk else 0))
    return prompt


def heaviest(run: Run, budget: int) -> Step:
    """The step of a run with the most tokens, roughly: a wave's new tokens (at most a chunk) beside the
    sequences sent before it (context left out: for what a step costs at short context)."""
    steps, running = [], 0
    for wave in run.waves:
        new = sum(p - wave.cached(i) for i, p in enumerate(wave.prompts))
        steps.append(Step(running + len(wave.prompts), min(budget, new + running), 0))
        running += len(wave.prompts)
    return max(steps, key=lambda s: (s.tokens, s.seqs))


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


def run_cost(fit: Fit, run: Run, limits: Limits, window: int | None) -> float:
    """About how long a run takes by the fit: its steps' work together, plus what each step beyond the
    first costs whatever it holds (the fixed term, and with a mixture of experts every expert read:
    the experts a run's tokens reach are counted once in the sum, and each step reads its own)."""
    work, steps = run_work(run, limits, window)
    per_step = fit.terms.get("fixed", 0.0)
    if fit.routing is not None:
        per_step += fit.terms.get("per_expert", 0.0) * fit.routing.layers * fit.routing.experts
    return fit.predict(work) + per_step * max(0, steps - 1)
