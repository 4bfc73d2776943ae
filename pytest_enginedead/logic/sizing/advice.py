"""What to set: the deadline, the guard's policy, and the limits that stay under a deadline.

* ``recommend.deadline_s``: headroom x the worst step (never below vLLM's stock 300 s,
  so a setup that lives today keeps living), the ``export`` line;
* every figure the advice uses is the upper end of the forecast's interval (the fit's
  uncertainty and the spread of repeated steps, ``Fit.upper``), and every worst step is
  bounded by the KV cache the server will have (``kvcache``);
* the guard's policy: ``base + per_seq x seqs + per_token x tokens`` that covers, for
  every batch the guard sees (sequences and tokens of the step it waits on), the
  heaviest step of that size: every token may attend ``max_model_len - 1`` keys, so
  the per-token term carries the context terms at the longest context;
* for a deadline that cannot change (vLLM's stock 300 s unless ``--deadline``): the
  largest ``--max-num-seqs`` (at the given token budget) and the largest
  ``--max-num-batched-tokens`` (at the given sequences) whose worst step x headroom
  stays under it; and a table of limits from common serving values (sequences 1-256,
  contexts from 2048, never under 2048 or the model's own context if that is smaller)
  whose worst step x headroom stays under it, one row per context, or none.

Pure maths over a ``Fit``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..timeouts.policies import STOCK_DEADLINE_S, Backend, TimeoutPolicy
from .fit import Fit
from .kvcache import KvCache, cache_of
from .shapes import Limits, StepPlan, binding, worst_step

#: the guard policy's cap when the worst step does not need more (the reference policy's)
POLICY_CAP_S = 7200.0

#: the values people serve with, which the limits table picks from
COMMON_SEQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
COMMON_TOKENS = (256, 512, 1024, 2048, 4096, 8192, 16384)
COMMON_CONTEXTS = (2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)
#: no context under this is advised (or the model's own, where it is shorter)
MIN_CONTEXT = 2048


@dataclass(frozen=True)
class LimitsRow:
    """At one context, the largest common limits whose worst step x headroom stays under the
    deadline (``max_num_seqs`` None: none do)."""

    max_model_len: int
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    worst_s: float | None = None

    def flags(self) -> str | None:
        if self.max_num_seqs is None:
            return None
        return (f"--max-model-len {self.max_model_len} --max-num-seqs {self.max_num_seqs} "
                f"--max-num-batched-tokens {self.max_num_batched_tokens}")

    def as_dict(self) -> dict[str, object]:
        return {"max_model_len": self.max_model_len, "max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.max_num_batched_tokens, "worst_s": self.worst_s,
                "flags": self.flags()}


def advised_contexts(limits: Limits, model_len: int | None) -> list[int]:
    """The contexts the table answers for: common ones from 2048 (or the model's own, if shorter)
    up to the model's own, and the one asked for."""
    top = model_len or limits.max_model_len
    floor = min(MIN_CONTEXT, top)
    picked = {c for c in COMMON_CONTEXTS if floor <= c <= top}
    if limits.max_model_len >= floor:
        picked.add(limits.max_model_len)
    if not picked:
        picked.add(top)
    return sorted(picked)


def limits_table(fit: Fit, limits: Limits, window: int | None, headroom: float, deadline_s: float,
                 model_len: int | None, kv: KvCache | None = None) -> list[LimitsRow]:
    """Per advised context: the most sequences (then tokens) of the common values that fit."""
    rows = []
    for ctx in advised_contexts(limits, model_len):
        best: LimitsRow | None = None
        for seqs in COMMON_SEQS:
            for tokens in COMMON_TOKENS:
                if tokens < seqs:  # vLLM refuses fewer tokens per step than sequences
                    continue
                lim = replace(limits, max_num_seqs=seqs, max_num_batched_tokens=tokens, max_model_len=ctx)
                if kv is not None and kv.bytes < kv.layout.reserve(ctx, tokens):
                    continue  # vLLM refuses a cache that cannot hold one request of max_model_len
                seconds = worst_time(fit, lim, window, kv)[1]
                if seconds * headroom <= deadline_s:
                    best = LimitsRow(ctx, seqs, tokens, seconds)
        rows.append(best or LimitsRow(ctx))
    return rows


@dataclass(frozen=True)
class Advice:
    headroom: float
    #: the deadline the limits are judged against (vLLM's stock, or --deadline)
    deadline_s: float
    worst: StepPlan
    #: the interval's upper end at the worst step (what the advice is taken from)
    worst_s: float
    #: headroom x worst step, whole seconds, never below vLLM's stock deadline
    recommended_s: int
    policy: TimeoutPolicy
    max_num_seqs_under_deadline: int | None
    max_num_batched_tokens_under_deadline: int | None
    #: the longest --max-model-len whose worst step stays under it at the given seqs and tokens
    max_model_len_under_deadline: int | None
    #: the ``vllm serve`` limits that keep the worst step under the deadline in force
    flags: str | None
    #: common serving limits that stay under the deadline, per context
    table: tuple[LimitsRow, ...] = ()
    #: the reference policy's cap at the worst step's sequences and tokens (the guard's default)
    reference_cap_s: float | None = None
    #: the worst step's forecast and its interval (low, high): ``worst_s`` is the high end
    worst_predicted_s: float | None = None
    worst_interval_s: tuple[float, float] | None = None
    #: the limits the worst step reaches (vLLM's flags by name, and ``kv_cache``)
    binding: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        """Whether the worst step, with headroom, stays under the deadline in force."""
        return self.worst_s * self.headroom <= self.deadline_s

    def as_dict(self) -> dict[str, object]:
        rule = self.policy.rules[Backend.CPU]
        return {
            "deadline_s": self.recommended_s,
            "export": f"export VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={self.recommended_s}",
            "deadline_in_force_s": self.deadline_s,
            "headroom": self.headroom,
            "worst_step_fits_deadline": self.fits,
            "max_num_seqs_under_deadline": self.max_num_seqs_under_deadline,
            "max_num_batched_tokens_under_deadline": self.max_num_batched_tokens_under_deadline,
            "max_model_len_under_deadline": self.max_model_len_under_deadline,
            "flags": self.flags,
            "limits_table": [row.as_dict() for row in self.table],
            "reference_cap_s": self.reference_cap_s,
            "from_interval_upper_s": self.worst_s,
            "binding": list(self.binding),
            "reference_cap_covers_worst": None if self.reference_cap_s is None
            else self.reference_cap_s >= self.worst_s,
            "policy": {
                "base_s": rule.base_s,
                "per_seq_s": rule.per_seq_s,
                "per_token_s": rule.per_token_s,
                "floor_s": rule.floor_s,
                "cap_s": rule.cap_s,
                "origin": self.policy.origin,
                "python": policy_source(self.policy),
            },
        }


def worst_time(fit: Fit, limits: Limits, window: int | None, kv: KvCache | None = None
               ) -> tuple[StepPlan, float]:
    """The heaviest step under these limits and cache, by the upper end of the fit's interval."""
    plan = worst_step(limits, window, fit.upper, kv)
    return plan, fit.upper(plan.step(window))


def guard_policy(
    fit: Fit, limits: Limits, window: int | None, headroom: float, cap_s: float, scale: float = 1.0
) -> TimeoutPolicy:
    """A policy whose ``timeout_s(CPU, seqs, tokens)`` covers any step of that many seqs and tokens
    (``scale``: the interval's upper end over the forecast, at the worst step).

    Linear in sequences and tokens, so each term is taken where it is largest: every token may
    attend ``max_model_len - 1`` keys (the per-token term carries the context terms there), every
    sequence may read as many (the per-sequence term carries the read terms), and a mixture of
    experts' steps read at most every expert of every MoE layer (folded into the base: the experts
    a step reaches bend with its tokens, and never pass that).
    """
    t = fit.terms
    top = max(1, limits.max_model_len - 1)
    window_top = top if window is None else min(top, window)
    per_token = t.get("per_token", 0.0) + t.get("per_context_token", 0.0) * top
    per_token += t.get("per_window_context_token", 0.0) * window_top
    per_seq = t.get("per_seq", 0.0) + t.get("per_read_token", 0.0) * top
    per_seq += t.get("per_window_read_token", 0.0) * window_top
    base = t.get("fixed", 0.0)
    if fit.routing is not None:
        base += t.get("per_expert", 0.0) * fit.routing.layers * fit.routing.experts
    return TimeoutPolicy.linear(
        headroom * scale * base,
        headroom * scale * per_seq,
        headroom * scale * per_token,
        floor_s=STOCK_DEADLINE_S,
        cap_s=max(POLICY_CAP_S, cap_s),
        origin=f"{headroom:g} x the step model at max_model_len {limits.max_model_len}",
    )


def policy_source(policy: TimeoutPolicy) -> str:
    """The Python line that builds ``policy`` (for a module named in ENGINEDEAD_GUARD_POLICY)."""
    rule = policy.rules[Backend.CPU]
    return (
        f"POLICY = TimeoutPolicy.linear(base_s={rule.base_s:.6g}, per_seq_s={rule.per_seq_s:.6g}, "
        f"per_token_s={rule.per_token_s:.6g}, cap_s={rule.cap_s:.6g})"
    )


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest n in [lo, hi] with ok(n), for ok true up to some n and false after; None if none."""
    if hi < lo or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


#: the largest --max-num-seqs searched (vLLM allows more; no CPU box batches more)
MAX_SEQS_SEARCHED = 8192


def advise(fit: Fit, limits: Limits, window: int | None, headroom: float, deadline_s: float,
           model_len: int | None = None, kv: KvCache | None = None) -> Advice:
    plan, worst_s = worst_time(fit, limits, window, kv)
    recommended = max(int(STOCK_DEADLINE_S), math.ceil(headroom * worst_s))

    def under(lim: Limits) -> bool:
        if kv is not None and kv.bytes < kv.layout.reserve(lim.max_model_len, lim.max_num_batched_tokens):
            return False  # vLLM would not start
        return worst_time(fit, lim, window, kv)[1] * headroom <= deadline_s

    n, t, length = limits.max_num_seqs, limits.max_num_batched_tokens, limits.max_model_len
    seqs = _largest(1, min(t, MAX_SEQS_SEARCHED), lambda k: under(replace(limits, max_num_seqs=k)))
    tokens = _largest(
        n, max(t, n * max(1, length - 1)), lambda k: under(replace(limits, max_num_batched_tokens=k))
    )
    flags: str | None
    if worst_s * headroom <= deadline_s:
        flags = f"--max-num-seqs {n} --max-num-batched-tokens {t}"
    elif tokens is not None:
        flags = f"--max-num-seqs {n} --max-num-batched-tokens {tokens}"
    elif seqs is not None:
        flags = f"--max-num-seqs {seqs} --max-num-batched-tokens {t}"
    else:
        both = _largest(
            1,
            min(n, MAX_SEQS_SEARCHED),
            lambda k: under(replace(limits, max_num_seqs=k, max_num_batched_tokens=k)),
        )
        flags = None if both is None else f"--max-num-seqs {both} --max-num-batched-tokens {both}"
    floor = min(MIN_CONTEXT, model_len or length)
    longest = _largest(floor, length, lambda k: under(replace(limits, max_model_len=k)))
    step = plan.step(window)
    predicted = fit.predict(step)
    policy = guard_policy(fit, limits, window, headroom, recommended,
                          worst_s / predicted if predicted > 0 else 1.0)
    table = tuple(limits_table(fit, limits, window, headroom, deadline_s, model_len, kv))
    reference = TimeoutPolicy().timeout_s(Backend.CPU, step.seqs, step.tokens)
    return Advice(headroom, deadline_s, plan, worst_s, recommended, policy, seqs, tokens, longest, flags,
                  table, reference, predicted, fit.interval(step),
                  tuple(binding(plan, limits, window, cache_of(limits, kv))))
