"""Kept for downstream code: the timeout policies live in ``pytest_enginedead.logic.timeouts.policies``."""

from __future__ import annotations

from .logic.timeouts.policies import (
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
