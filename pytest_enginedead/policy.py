"""Kept for downstream code: the timeout policies live in ``pytest_enginedead.logic.policy``."""

from __future__ import annotations

from .logic.policy import (
    STOCK_DEADLINE_S,
    Backend,
    PolicyError,
    PolicyLike,
    PolicyNotFound,
    Rule,
    TimeoutPolicy,
    fit_step_time,
    load_policy,
    policy_name,
)

__all__ = ["STOCK_DEADLINE_S", "Backend", "PolicyError", "PolicyLike", "PolicyNotFound", "Rule",
           "TimeoutPolicy",
           "fit_step_time", "load_policy", "policy_name"]
