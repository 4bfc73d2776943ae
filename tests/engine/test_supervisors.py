"""What operators' supervisors see of real servers: the enginedead probe and the exit status."""

from __future__ import annotations

import psutil
import pytest

from downstream import Downstream, assert_nothing_left, engine_processes

pytestmark = pytest.mark.engine


def test_probe_and_exit_status_on_real_servers(downstream: Downstream, decoy: psutil.Process) -> None:
    """Two guarded servers at once: the probe stays alive through slow steps (>= 3 x the 2 s
    deadline) and turns within hang_s + one period of a hang; the hung server exits with
    EXIT_HUNG; an unguarded false death with the opt-in exits with EXIT_DEAD."""
    result = downstream.copy("operators").run("-rA", "-s", plugins=["timeout"], in_subprocess=True,
                                               report=True)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["probe: * probes, wall max *; hang found * after it began (hang_s 3)*"])
    data = result.report
    assert data is not None
    assert data["engines_started"] == 3
    assert_nothing_left(*engine_processes(data), decoy)
