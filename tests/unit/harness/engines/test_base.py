"""What every kind of engine shares: its run directory, and the guard's start-up record held
against what the harness asked for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_enginedead.contract.guardfiles import CoreReady
from pytest_enginedead.harness.engines.base import EngineBase
from pytest_enginedead.harness.engines.coreready import guard_problem
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.planning.engines import EngineSpec, GuardSpec
from tests.support.badinput import leftovers
from tests.support.guards import GUARD_MARKER, NOT_IMPORTABLE


@pytest.mark.parametrize(
    ("asked", "ready", "needles"),
    [
        (GUARD_MARKER, CoreReady(7, True, True, "edcap:cap", "cap-4s", 3.0), None),
        (None, CoreReady(7, False, False), None),
        (GUARD_MARKER, CoreReady(7, False, True, "edcap:cap", problem=NOT_IMPORTABLE),
         ("the guard is off: the enginedead_guard marker asked for the guard (policy 'edcap:cap', "
          "hang_s 3 s), and VLLM::EngineCore (pid 7) refused it: " + NOT_IMPORTABLE,)),
        (GUARD_MARKER, CoreReady(7, False, False), ("VLLM::EngineCore (pid 7) refused it: ENGINEDEAD_GUARD "
                                                     "did not reach it",)),
        (GUARD_MARKER, CoreReady(7, True, True, "reference", "reference", 3.0),
         ("the guard is not as asked", "runs it with policy 'reference', hang_s 3 s")),
        (GUARD_MARKER, CoreReady(7, True, True, "edcap:cap", "cap-4s", 60.0), ("hang_s 60 s",)),
        (None, CoreReady(7, True, True, "reference", "reference", 60.0),
         ("the guard was not asked for, but VLLM::EngineCore (pid 7) saw ENGINEDEAD_GUARD set (on)",)),
    ],
    ids=["as-asked", "off-as-asked", "refused", "never-reached", "other-policy", "other-hang", "unasked"],
)
def test_the_harness_holds_the_record_against_what_it_asked(
    asked: GuardSpec | None, ready: CoreReady, needles: tuple[str, ...] | None
) -> None:
    problem = guard_problem(asked, ready)
    if needles is None:
        assert problem is None
        return
    assert problem is not None and "\n" not in problem
    for needle in needles:
        assert needle in problem, (needle, problem)


def test_an_engines_run_directory_goes_with_it(private_tmp: Path) -> None:
    """Each engine's run directory (``enginedead-*``) is removed when the engine stops."""
    engine = EngineBase(EngineSpec(BUNDLED_MODEL, 8))
    assert leftovers(private_tmp) == [os.path.basename(engine.run_dir)]
    engine.stop()
    assert leftovers(private_tmp) == []
