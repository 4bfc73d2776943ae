"""The guard as the environment asks for it: ``ENGINEDEAD_GUARD*`` read and checked.

One reading wherever the variables are read: the guard in ``VLLM::EngineCore``, the plugin and the
commands; a bad value is one line naming the variable and its value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ...contract.names import GUARD_ENV, GUARD_HANG_ENV, GUARD_PATH_ENV, GUARD_POLICY_ENV, POLICY_OPTION_ENV
from ..timeouts.policies import (
    PolicyError,
    PolicyFailure,
    PolicyLike,
    PolicyNotFound,
    load_policy,
    policy_deadline,
    policy_name,
)

DEFAULT_HANG_S = 60.0
#: the shortest idle grace the guard takes: it looks at the worker every 0.25 s
#: (``vllm_plugin.guard.PROBE_EVERY_S``), so a shorter one ends a healthy wait at its first idle sample
HANG_FLOOR_S = 0.25


@dataclass(frozen=True)
class GuardConfig:
    """The guard as the environment asks for it."""

    policy: PolicyLike
    policy_name: str
    hang_s: float
    #: the policy as it was given (``reference``, ``vllm-stock``, ``module:attr``)
    spec: str = "reference"


def guard_asked(environ: Mapping[str, str]) -> bool:
    """Whether ``ENGINEDEAD_GUARD`` asks for the guard (any value but an off one)."""
    return environ.get(GUARD_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def config_from_env(
    environ: Mapping[str, str], vllm_version: str | None = None
) -> tuple[GuardConfig | None, str | None]:
    """(the guard's configuration or None when off, why it stays off although asked, or None).

    A bad value is a problem, and the guard stays off: never a crashed engine.  The
    problem names the variable, its value and what is wrong, in one line.
    """
    if not guard_asked(environ):
        return None, None
    raw = environ.get(GUARD_ENV, "").strip()
    if raw.lower() not in ("1", "true", "yes", "on"):
        return None, f"{GUARD_ENV}={raw!r} is not 1 or 0"
    hang_raw = environ.get(GUARD_HANG_ENV, "").strip()
    try:
        hang_s = float(hang_raw) if hang_raw else DEFAULT_HANG_S
    except ValueError:
        hang_s = math.nan
    if not (math.isfinite(hang_s) and hang_s > 0):
        return None, f"{GUARD_HANG_ENV}={hang_raw!r} is not a number of seconds above 0"
    if hang_s < HANG_FLOOR_S:
        return None, (f"{GUARD_HANG_ENV}={hang_raw!r} is below {HANG_FLOOR_S:g} s, how often the guard "
                      "looks at the worker: a wait would end at its first idle sample")
    spec = environ.get(GUARD_POLICY_ENV, "").strip() or "reference"
    search = [os.getcwd(), *filter(None, environ.get(GUARD_PATH_ENV, "").split(os.pathsep))]
    try:
        policy = load_policy(spec, search, vllm_version)
    except PolicyNotFound as exc:
        return None, (
            f"{GUARD_POLICY_ENV}={spec!r}: the policy module is not importable in the engine core: "
            f"add it to PYTHONPATH or {GUARD_PATH_ENV} ({exc})"
        )
    except PolicyError as exc:
        return None, f"{GUARD_POLICY_ENV}={spec!r}: {exc}"
    name = policy_name(policy, spec)
    try:
        for n in PROBED_BATCHES:
            policy_deadline(policy, name, n)
    except PolicyFailure as exc:  # a cap that is no number never caps: the guard stays off
        return None, f"{GUARD_POLICY_ENV}={spec!r}: {exc}"
    return GuardConfig(policy, name, hang_s, spec), None


#: the batch sizes a guard's policy is asked about before the guard turns on: it must give
#: a cap vLLM can hold at each (a real, finite number of seconds >= 1)
PROBED_BATCHES = (1, 8, 64, 256)


def misplaced_policy(environ: Mapping[str, str]) -> str | None:
    """``ENGINEDEAD_POLICY`` (the pytest option's variable) set where the guard reads
    ``ENGINEDEAD_GUARD_POLICY``: what a production guard says about it, or None."""
    raw = environ.get(POLICY_OPTION_ENV)
    if raw is None or environ.get(GUARD_POLICY_ENV) is not None or not guard_asked(environ):
        return None
    return (f"{POLICY_OPTION_ENV}={raw!r} is the pytest option's variable; the guard reads "
            f"{GUARD_POLICY_ENV} (unset: the reference policy caps each step)")
