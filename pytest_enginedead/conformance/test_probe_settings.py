"""Your probe settings held against real servers with the guard on (``probing``).

Each setting (``NAME=PERIOD/TIMEOUT/THRESHOLD``, comma-separated, in
``ENGINEDEAD_PROBE_SETTINGS``) is replayed for one probe kind
(``ENGINEDEAD_PROBE_KIND``: ``probe`` — ``enginedead probe``, the default —,
``health``, ``models`` or ``completion``) over samples of two servers measured once per
session: a SLOW engine (steps busy past a 2 s deadline under 64 clients) that the
setting must never kill, and a HUNG one (the worker idle inside a step) that it must
find within the window (``ENGINEDEAD_PROBE_WINDOW``, default 60 s; the guard's
``hang_s`` is ``ENGINEDEAD_PROBE_HANG_S``, default 10 s).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from ..contract.decisions import Verdict
from ..logic.reporting import probereplay

if TYPE_CHECKING:
    from .conftest import Plan


def test_a_slow_engine_is_never_killed(
    measured: Callable[[Verdict], probereplay.Run], plan: type[Plan], setting: probereplay.Setting
) -> None:
    run = measured(Verdict.SLOW)
    kill = run.kill_after(plan.kind, setting)
    print(f"{plan.kind} {setting.describe()} on a SLOW engine: {probereplay.cell(run, plan.kind, setting)}")
    if kill is not None:
        pytest.fail(f"{plan.kind} with {setting.describe()} would have restarted a server whose engine "
                    f"was computing, {kill:g} s into its slow steps (a false kill); the guard kept it "
                    "alive. Raise the timeout or the failure threshold, or probe with `enginedead probe`.",
                    pytrace=False)


def test_a_hung_engine_is_found(
    measured: Callable[[Verdict], probereplay.Run], plan: type[Plan], setting: probereplay.Setting
) -> None:
    run = measured(Verdict.HUNG)
    kill = run.kill_after(plan.kind, setting)
    print(f"{plan.kind} {setting.describe()} on a HUNG engine: {probereplay.cell(run, plan.kind, setting)}")
    if kill is None:
        pytest.fail(f"{plan.kind} with {setting.describe()} did not find a worker hung inside its step "
                    f"within {plan.window_s:g} s (the guard's hang_s {plan.hang_s:g} s); shorten the "
                    "period or the threshold.", pytrace=False)
