"""The plugin's markers: their documentation and the parsing of their arguments.

A bad marker argument fails that test (and only that test) with a message naming
the marker and the argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from . import invariants
from .options import BadValue, check_batch_sizes
from .worker import Injection

DOCS = (
    "enginedead_batch_sizes(*sizes): run this test's engine fixtures at these batch "
    "sizes instead of --enginedead-batch-sizes.",
    "enginedead_invariants(*names, cap_s=None, headroom=None, step_times=None): check "
    "these invariants of the active timeout policy (cpu_gt_gpu, grows_with_batch, "
    "capped, headroom, not_below_stock); a violation fails the test with the numbers. "
    "headroom uses the engine's measured step times, or step_times={batch: seconds}.",
    "enginedead_timeout(seconds): pin this test's engine to a fixed execute-model "
    "deadline instead of the policy (to reproduce vLLM's stock behaviour).",
    "enginedead_inject(slow_s_per_seq=0.0, hang_at_step=None, crash_at_step=None): fault "
    "injection inside the engine's worker: each step first burns CPU for "
    "slow_s_per_seq x its batch size; at step N (from 1) it blocks idle forever, or "
    "exits the worker process.",
)


class BadMarker(ValueError):
    """A marker with arguments it does not take; the message says which."""


def _only(marker: pytest.Mark, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(marker.kwargs) - set(allowed))
    if unknown:
        raise BadMarker(
            f"@pytest.mark.{marker.name} got unknown argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(allowed) or 'no keyword arguments'}"
        )


def _number(marker: pytest.Mark, name: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadMarker(f"@pytest.mark.{marker.name}: {name}={value!r} is not a number")
    if value < minimum:
        raise BadMarker(f"@pytest.mark.{marker.name}: {name}={value!r} must be >= {minimum:g}")
    return float(value)


def _step(marker: pytest.Mark, name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadMarker(
            f"@pytest.mark.{marker.name}: {name}={value!r} must be a step number >= 1"
        )
    return value


def batch_sizes(marker: pytest.Mark) -> tuple[int, ...]:
    _only(marker, ())
    try:
        return check_batch_sizes(tuple(marker.args))
    except BadValue as exc:
        raise BadMarker(f"@pytest.mark.enginedead_batch_sizes{marker.args!r}: {exc}") from None


def timeout(marker: pytest.Mark) -> float:
    _only(marker, ("seconds",))
    args = list(marker.args)
    if "seconds" in marker.kwargs:
        args.append(marker.kwargs["seconds"])
    if len(args) != 1:
        raise BadMarker("@pytest.mark.enginedead_timeout takes one argument: seconds")
    seconds = _number(marker, "seconds", args[0])
    if seconds <= 0:
        raise BadMarker(f"@pytest.mark.enginedead_timeout: seconds={args[0]!r} must be > 0")
    return seconds


def inject(marker: pytest.Mark) -> Injection:
    allowed = ("slow_s_per_seq", "hang_at_step", "crash_at_step")
    _only(marker, allowed)
    if marker.args:
        raise BadMarker(
            "@pytest.mark.enginedead_inject takes keyword arguments only: " + ", ".join(allowed)
        )
    kw = marker.kwargs
    return Injection(
        slow_s_per_seq=_number(marker, "slow_s_per_seq", kw.get("slow_s_per_seq", 0.0)),
        hang_at_step=_step(marker, "hang_at_step", kw.get("hang_at_step")),
        crash_at_step=_step(marker, "crash_at_step", kw.get("crash_at_step")),
    )


@dataclass(frozen=True)
class InvariantRequest:
    names: tuple[str, ...]
    cap_s: float | None
    headroom: float | None
    step_times: Mapping[int, float] | None


def invariant_request(marker: pytest.Mark) -> InvariantRequest:
    _only(marker, ("cap_s", "headroom", "step_times"))
    names = tuple(marker.args)
    if not names:
        raise BadMarker(
            "@pytest.mark.enginedead_invariants needs at least one invariant name; "
            f"valid: {', '.join(invariants.NAMES)}"
        )
    bad = [n for n in names if not isinstance(n, str) or n not in invariants.NAMES]
    if bad:
        raise BadMarker(
            f"@pytest.mark.enginedead_invariants: unknown invariant {', '.join(map(repr, bad))}; "
            f"valid: {', '.join(invariants.NAMES)}"
        )
    kw = marker.kwargs
    cap = kw.get("cap_s")
    room = kw.get("headroom")
    steps = kw.get("step_times")
    if steps is not None:
        if not isinstance(steps, Mapping) or not steps:
            raise BadMarker(
                "@pytest.mark.enginedead_invariants: step_times must be a non-empty "
                "{batch_size: seconds} mapping"
            )
        for n, s in steps.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise BadMarker(f"@pytest.mark.enginedead_invariants: step_times key {n!r} is not a batch size")
            _number(marker, f"step_times[{n}]", s)
    return InvariantRequest(
        names,
        None if cap is None else _number(marker, "cap_s", cap),
        None if room is None else _number(marker, "headroom", room),
        None if steps is None else {int(n): float(s) for n, s in steps.items()},
    )
