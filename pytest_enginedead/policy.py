"""Kept for downstream code, deprecated, removed in 0.4.0: the timeout policies live in
``pytest_enginedead.logic.timeouts.policies``."""

from __future__ import annotations

import warnings

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

warnings.warn(
    "pytest_enginedead.policy is deprecated (removed in 0.4.0): import from "
    "pytest_enginedead.logic.timeouts.policies (TimeoutPolicy and Backend also from pytest_enginedead)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["STOCK_DEADLINE_S", "Backend", "PolicyError", "PolicyLike", "PolicyNotFound", "Rule",
           "TimeoutPolicy",
           "fit_step_time", "load_policy", "policy_name"]
