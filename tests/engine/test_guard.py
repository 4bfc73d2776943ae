"""The guard inside VLLM::EngineCore, on real engines: busy steps survive vLLM's deadline,
hung workers are given up on after hang_s, crashes stay quick, the cap holds — and
unset, nothing in vLLM is patched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from downstream import Downstream, assert_nothing_left, engine_processes
from pytest_enginedead import compat

pytestmark = pytest.mark.engine


@pytest.mark.smoke
def test_guard_waits_for_busy_workers_and_gives_up_on_hung_ones(
    downstream: Downstream, decoy: psutil.Process
) -> None:
    result = downstream.copy("guard").run("-rA", plugins=["timeout"], in_subprocess=True, report=True)
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["FAILED test_guard_suite.py::test_the_guard_never_waits_past_its_cap*"])
    assert "false engine death: vLLM raised EngineDeadError while its worker was still computing" in out
    # the cap's death carries the guard's evidence: it waited, and stopped at the cap
    assert "guard:      SLOW, past the cap: the engine dies as stock vLLM would" in out, out[-4000:]
    assert "the guard's cap 4 s" in out
    assert "what to change: the guard's cap (4 s) is shorter than one step of this batch" in out
    data = result.report
    assert data is not None
    tests = {t["nodeid"].split("::")[-1]: t for t in data["tests"] if t["when"] == "call"}
    assert [e["verdict"] for e in tests["test_busy_steps_survive_the_stock_deadline[bs64]"]["guard_events"]]
    assert tests["test_a_hang_ends_after_hang_s_not_600s[bs64]"]["verdict"] == "HUNG"
    assert tests["test_a_crash_is_as_quick_as_without_the_guard[bs64]"]["verdict"] == "DEAD"
    assert tests["test_the_guard_never_waits_past_its_cap[bs64]"]["verdict"] == "SLOW"
    # two guard configurations (reference policy, the 4 s cap); the hang's death restarts one
    assert data["configurations"] == 2
    assert data["engines_started"] == 3 and data["restarts"] == 1
    assert all(e["guard"] for e in data["engines"])
    assert_nothing_left(*engine_processes(data), decoy)


INERT = textwrap.dedent(
    """
    import os, sys
    if __name__ == "__main__":
        from vllm import LLM, SamplingParams
        from pytest_enginedead import compat
        llm = LLM(**compat.llm_kwargs(sys.argv[1], 2))
        out = llm.generate([{"prompt_token_ids": [5, 6, 7]}], SamplingParams(max_tokens=2, ignore_eos=True))
        assert len(out[0].outputs[0].token_ids) == 2
        compat.shutdown_llm(llm)
    """
)


@pytest.mark.parametrize(
    ("env", "patched", "logged"),
    [
        ({}, False, None),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "soon"}, False,
         "ENGINEDEAD_GUARD_HANG_S='soon' is not a number of seconds above 0; the guard stays off"),
    ],
    ids=["unset", "bad-value"],
)
def test_unset_or_bad_the_guard_touches_nothing_in_vllm(
    tmp_path: Path, env: dict[str, str], patched: bool, logged: str | None
) -> None:
    """A plain vLLM with the plugin installed, no harness: the engine core reports which of
    the attributes the guard could replace are replaced (none), and the engine works."""
    from pytest_enginedead.options import BUNDLED_MODEL

    script = tmp_path / "inert.py"
    script.write_text(INERT)
    report = tmp_path / "patches.json"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ENGINEDEAD_")}
    done = subprocess.run(
        [sys.executable, str(script), BUNDLED_MODEL],
        env={**clean, **compat.engine_environment(), **env, "ENGINEDEAD_REPORT_PATCHES": str(report)},
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(report.read_text()) == {
        "MultiprocExecutor.collective_rpc": patched,
        "MessageQueue.ReadTimeoutWithWarnings": patched,
    }
    if logged:
        assert sum(logged in line for line in done.stderr.splitlines() + done.stdout.splitlines()) == 1
