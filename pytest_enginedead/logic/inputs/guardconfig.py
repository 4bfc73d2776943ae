"""The guard as the environment asks for it: ``ENGINEDEAD_GUARD*`` read and checked.

One reading wherever the variables are read: the guard in ``VLLM::EngineCore``, the plugin and the
commands; a bad value is one line naming the variable and its value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...contract.names import (
    GUARD_ENV,
    GUARD_HANG_ENV,
    GUARD_PATH_ENV,
    GUARD_POLICY_ENV,
    METRICS_ENV,
    POLICY_OPTION_ENV,
)
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


_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def metrics_from_env(environ: Mapping[str, str]) -> tuple[bool, str | None]:
    """(whether the plugin's figures go on vLLM's ``/metrics``, why a value was refused or None).

    ``ENGINEDEAD_METRICS=1`` turns them on without the guard, ``0`` off; unset (or empty) they follow
    ``ENGINEDEAD_GUARD``: asked for, the guard brings them (also when it then refuses to turn on,
    which they show).  A value that is neither leaves them off, with the line that says so.
    """
    raw = environ.get(METRICS_ENV, "").strip()
    if not raw:
        return guard_asked(environ), None
    if raw.lower() in _ON:
        return True, None
    if raw.lower() in _OFF:
        return False, None
    return False, f"{METRICS_ENV}={raw!r} is not 1 or 0; the metrics stay off"


#: vLLM's API server listens here unless ``--port`` says otherwise
DEFAULT_PORT = 8000


def serving_port(argv: Sequence[str]) -> int | None:
    """The port a vLLM API server's command line listens on (``--port N`` or ``--port=N``, else 8000);
    None when ``argv`` is not an API server's (``python -m vllm.entrypoints.openai.api_server``, ``vllm
    serve``) or its port is not a number."""
    prog = os.path.basename(argv[0]) if argv else ""
    if not ("api_server" in prog or (prog == "vllm" and len(argv) > 1 and argv[1] == "serve")):
        return None
    port: str | None = None
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv):
            port = argv[i + 1]
        elif arg.startswith("--port="):
            port = arg.split("=", 1)[1]
    if port is None:
        return DEFAULT_PORT
    return int(port) if port.isdigit() and 0 < int(port) < 65536 else None
