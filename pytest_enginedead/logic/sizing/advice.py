"""What to set: the deadline, the guard's policy, and the limits that stay under a deadline.

* ``recommend.deadline_s``: headroom x the worst step (never below vLLM's stock 300 s,
  so a setup that lives today keeps living), the ``export`` line;
* the guard's policy: ``base + per_seq x seqs + per_token x tokens`` that covers, for
  every batch the guard sees (sequences and tokens of the step it waits on), the
  heaviest step of that size: every token may attend ``max_model_len - 1`` keys, so
  the per-token term carries the context terms at the longest context;
* for a deadline that cannot change (vLLM's stock 300 s unless ``--deadline``): the
  largest ``--max-num-seqs`` (at the given token budget) and the largest
  ``--max-num-batched-tokens`` (at the given sequences) whose worst step x headroom
  stays under it, and the ``vllm serve`` flags that follow.

Pure maths over a ``Fit``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..policy import STOCK_DEADLINE_S, Backend, TimeoutPolicy
from .fit import Fit
from .shapes import Limits, StepPlan, worst_step

#: the guard policy's cap when the worst step does not need more (the reference policy's)
POLICY_CAP_S = 7200.0


@dataclass(frozen=True)
class Advice:
    headroom: float
    #: the deadline the limits are judged against (vLLM's stock, or --deadline)
    deadline_s: float
    worst: StepPlan
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


def worst_time(fit: Fit, limits: Limits, window: int | None) -> tuple[StepPlan, float]:
    plan = worst_step(limits, window, fit.predict)
    return plan, fit.predict(plan.step(window))


def guard_policy(
    fit: Fit, limits: Limits, window: int | None, headroom: float, cap_s: float
) -> TimeoutPolicy:
    """A policy whose ``timeout_s(CPU, seqs, tokens)`` covers any step of that many seqs and tokens."""
    t = fit.terms
    top = max(1, limits.max_model_len - 1)
    per_token = t.get("per_token", 0.0) + t.get("per_context_token", 0.0) * top
    per_token += t.get("per_window_context_token", 0.0) * (top if window is None else min(top, window))
    return TimeoutPolicy.linear(
        headroom * t.get("fixed", 0.0),
        headroom * t.get("per_seq", 0.0),
        headroom * per_token,
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


def advise(fit: Fit, limits: Limits, window: int | None, headroom: float, deadline_s: float) -> Advice:
    plan, worst_s = worst_time(fit, limits, window)
    recommended = max(int(STOCK_DEADLINE_S), math.ceil(headroom * worst_s))

    def under(lim: Limits) -> bool:
        return worst_time(fit, lim, window)[1] * headroom <= deadline_s

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
    longest = _largest(2, length, lambda k: under(replace(limits, max_model_len=k)))
    policy = guard_policy(fit, limits, window, headroom, recommended)
    return Advice(headroom, deadline_s, plan, worst_s, recommended, policy, seqs, tokens, longest, flags)
