"""The guard as the tests of several rooms see it: its state file's records, the line of a
policy the engine core cannot import, a guard asked for by the marker."""

from __future__ import annotations

from pytest_enginedead.contract.decisions import Verdict
from pytest_enginedead.contract.guardfiles import GuardState
from pytest_enginedead.logic.planning.engines import GuardSpec

#: the engine core's line for a guard policy it cannot import
NOT_IMPORTABLE = ("ENGINEDEAD_GUARD_POLICY='ednowhere_i23:cap': the policy module is not importable in "
                  "the engine core: add it to PYTHONPATH or ENGINEDEAD_GUARD_PATH "
                  "(no module named 'ednowhere_i23')")

#: the guard as the ``enginedead_guard`` marker asks for it
GUARD_MARKER = GuardSpec(3.0, "edcap:cap", "the enginedead_guard marker")

HANG_S = 5.0


def state(**kw: object) -> GuardState:
    """The guard's state file of an engine core (pid 10, front 9), outside any step."""
    base: dict[str, object] = dict(pid=10, front=9, hang_s=HANG_S, policy="reference", updated=100.0)
    base.update(kw)
    return GuardState(**base)  # type: ignore[arg-type]


def in_step(**kw: object) -> GuardState:
    """The same, in a step past its 2 s deadline, its worker busy (SLOW)."""
    base: dict[str, object] = dict(in_step=True, method="execute_model", step=5, batch=64, deadline_s=2.0,
                                   cap_s=1240.0, sent=90.0, busy_at=100.0, verdict=Verdict.SLOW, cores=0.98,
                                   worker=11)
    base.update(kw)
    return state(**base)
