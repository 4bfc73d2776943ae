"""The plugin's markers: their documentation and the parsing of their arguments.

A bad marker argument fails that test (and only that test) with a message naming
the marker and the argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from ..contract.control import Injection
from ..logic.inputs.arguments import INJECT_ARGS, BadMarker, injection, number, whole_seconds
from ..logic.inputs.guardconfig import HANG_FLOOR_S
from ..logic.inputs.values import BadValue, check_batch_sizes
from ..logic.timeouts import invariants
from .markerdocs import DOCS as DOCS  # their one definition, read at every configure


def _only(marker: pytest.Mark, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(marker.kwargs) - set(allowed))
    if unknown:
        raise BadMarker(
            f"@pytest.mark.{marker.name} got unknown argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(allowed) or 'no keyword arguments'}"
        )


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
    return whole_seconds("@pytest.mark.enginedead_timeout", "seconds", args[0])


def inject(marker: pytest.Mark) -> Injection:
    if marker.args:
        raise BadMarker(
            "@pytest.mark.enginedead_inject takes keyword arguments only: " + ", ".join(INJECT_ARGS)
        )
    return injection("@pytest.mark.enginedead_inject", marker.kwargs)


def guard(marker: pytest.Mark) -> tuple[float | None, str | None]:
    """``enginedead_guard``'s (hang_s, policy spec), each None when not given."""
    what = "@pytest.mark.enginedead_guard"
    _only(marker, ("hang_s", "policy"))
    if marker.args:
        raise BadMarker(f"{what} takes keyword arguments only: hang_s, policy")
    hang = marker.kwargs.get("hang_s")
    policy = marker.kwargs.get("policy")
    if hang is not None:
        hang = number(what, "hang_s", hang)
        if hang <= 0:
            raise BadMarker(f"{what}: hang_s={marker.kwargs['hang_s']!r} must be above 0")
        if hang < HANG_FLOOR_S:
            raise BadMarker(f"{what}: hang_s={marker.kwargs['hang_s']!r} is below {HANG_FLOOR_S:g} s, how "
                            "often the guard looks at the worker: a wait would end at its first idle sample")
    if policy is not None and (not isinstance(policy, str) or not policy.strip()):
        raise BadMarker(f"{what}: policy={policy!r} must be reference, vllm-stock or module:attr")
    return hang, policy.strip() if isinstance(policy, str) else None


@dataclass(frozen=True)
class InvariantRequest:
    names: tuple[str, ...]
    cap_s: float | None
    headroom: float | None
    step_times: Mapping[int, float] | None


def invariant_request(marker: pytest.Mark) -> InvariantRequest:
    what = "@pytest.mark.enginedead_invariants"
    _only(marker, ("cap_s", "headroom", "step_times"))
    names = _invariant_names(what, tuple(marker.args))
    kw = marker.kwargs
    cap, room, steps = kw.get("cap_s"), kw.get("headroom"), kw.get("step_times")
    return InvariantRequest(
        names,
        None if cap is None else number(what, "cap_s", cap),
        None if room is None else _headroom(what, room),
        None if steps is None else _step_times(what, steps),
    )


def _invariant_names(what: str, names: tuple[Any, ...]) -> tuple[str, ...]:
    """The marker's invariant names: at least one, each one ``invariants.NAMES`` knows."""
    if not names:
        raise BadMarker(
            f"{what} needs at least one invariant name; valid: {', '.join(invariants.NAMES)}"
        )
    bad = [n for n in names if not isinstance(n, str) or n not in invariants.NAMES]
    if bad:
        raise BadMarker(
            f"{what}: unknown invariant {', '.join(map(repr, bad))}; "
            f"valid: {', '.join(invariants.NAMES)}"
        )
    return names


def _step_times(what: str, steps: Any) -> dict[int, float]:
    """``step_times``: a non-empty mapping of batch sizes (whole numbers >= 1) to seconds."""
    if not isinstance(steps, Mapping) or not steps:
        raise BadMarker(f"{what}: step_times must be a non-empty {{batch_size: seconds}} mapping")
    for n, s in steps.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BadMarker(f"{what}: step_times key {n!r} is not a batch size")
        number(what, f"step_times[{n}]", s)
    return {int(n): float(s) for n, s in steps.items()}


def _headroom(what: str, value: Any) -> float:
    room = number(what, "headroom", value)
    if room <= 0:
        raise BadMarker(
            f"{what}: headroom={value!r} must be above 0 "
            "(a multiple of the step time, e.g. 3); 0 would pass any policy"
        )
    return room
