"""The guard inside VLLM::EngineCore, on real engines: busy steps survive vLLM's deadline,
hung workers are given up on after hang_s, the cap holds — and unset, nothing in vLLM is
patched.  (A crash under the guard stays as quick as without it: test_xdist.py's suite,
whose guarded engine it ends.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psutil
import pytest

from pytest_enginedead.compat import llm_config
from tests.support import examples
from tests.support.downstream import Downstream, assert_nothing_left, engine_processes

pytestmark = pytest.mark.engine


#: what each bad argument in the suite's test_guard_asked.py must say, in its one line
BAD_ARGUMENTS = {
    "test_bad_generate_argument[bs64-arriving-negative]": "EngineHandle.generate: arriving=-1 is not a whole",
    "test_bad_generate_argument[bs64-prompt-len-zero]": "EngineHandle.generate: prompt_len=0 is not a whole",
    "test_bad_generate_argument[bs64-n-zero]": "EngineHandle.generate: n=0 is not a whole number",
    "test_bad_generate_argument[bs64-past-max-model-len]":
        "prompt_len=4 + max_tokens=600 is 604 tokens, more than the engine's max_model_len 512",
    "test_bad_factory_argument_beside_the_shared_engine[bs64-server-port]":
        "vllm_server_factory: port=18123 is the harness's to set: the harness picks a free port",
    "test_bad_factory_argument_beside_the_shared_engine[bs64-engine-unknown-argument]":
        "vllm_engine_factory: no_such_flag=1 is not an engine argument of vLLM",
    "test_bad_factory_argument_beside_the_shared_engine[bs64-server-unknown-argument]":
        "vllm_server_factory: no_such_flag=1 becomes --no-such-flag, which the API server of vLLM",
    "test_bad_factory_argument_beside_the_shared_engine[bs64-engine-unknown-architecture]":
        "config.json names architecture NoSuchModelForCausalLM, which vLLM",
}
REFUSED = "test_a_guard_policy_the_engine_core_cannot_import[bs64]"


def durations(out: str) -> dict[tuple[str, str], float]:
    """``(phase, test name) -> seconds`` from pytest's ``--durations=0`` lines."""
    found = re.findall(r"^(\d+\.\d+)s (setup|call|teardown) +\S+::(\S+)$", out, re.M)
    return {(phase, name): float(t) for t, phase, name in found}


@pytest.mark.smoke
def test_guard_waits_for_busy_workers_and_gives_up_on_hung_ones(
    downstream: Downstream, bystander: psutil.Process
) -> None:
    """The guard on real engines (test_guard_suite.py), and the same engine asked wrongly
    (test_guard_asked.py): each bad argument fails its test in one line while the shared
    engine serves on; a guard policy the engine core cannot import fails its test."""
    result = downstream.copy(examples.GUARD).run("-rA", "--durations=0", "--durations-min=0",
                                                 plugins=["timeout"], in_subprocess=True, report=True)
    result.assert_outcomes(passed=2, failed=1 + len(BAD_ARGUMENTS), errors=1)
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
    assert tests["test_the_guard_never_waits_past_its_cap[bs64]"]["verdict"] == "SLOW"
    # three guard configurations (reference policy, the 4 s cap, the policy the engine core
    # cannot import); each death is its engine's last test: nothing restarts
    assert data["configurations"] == 3
    assert data["engines_started"] == 3 and data["restarts"] == 0
    assert all(e["guard"] for e in data["engines"])
    # every bad argument: its own line, fast, and the shared engine not thrown away for it
    took = durations(out)
    shared = next(e for e in data["engines"] if set(BAD_ARGUMENTS) <= {t.split("::")[-1] for t in e["tests"]})
    # after them, on the same engine: the busy batch, then the hang that ends it (its one death)
    assert not shared["restart"] and (shared["false_deaths"], shared["genuine_deaths"]) == (0, 1)
    assert shared["tests"][len(BAD_ARGUMENTS):] == [
        "test_guard_suite.py::test_busy_steps_survive_the_stock_deadline[bs64]",
        "test_guard_suite.py::test_a_hang_ends_after_hang_s_not_600s[bs64]",
    ]
    for name, line in BAD_ARGUMENTS.items():
        assert line in out, (name, line)
        assert any(ln.startswith(f"FAILED test_guard_asked.py::{name}") for ln in out.splitlines()), name
        assert took[("call", name)] < shared["start_s"] / 4, (name, took[("call", name)], shared["start_s"])
    # the guard asked for and refused by the engine core: the test fails saying why, as soon as
    # the engine core's record says so (before the engine would have been ready)
    assert any(ln.startswith(f"ERROR test_guard_asked.py::{REFUSED}") for ln in out.splitlines())
    refusal = (
        "the guard is off: the enginedead_guard marker asked for the guard (policy 'edhidden:cap', "
        "hang_s 3 s), and VLLM::EngineCore (pid *) refused it: ENGINEDEAD_GUARD_POLICY='edhidden:cap': "
        "the policy module is not importable in the engine core: add it to PYTHONPATH or "
        "ENGINEDEAD_GUARD_PATH (no module named 'edhidden')"
    )
    result.stdout.fnmatch_lines([refusal])
    assert "never runs" not in out
    (refused,) = [e for e in data["engines"] if "edhidden" in e["label"]]
    assert refused["start_s"] is None and refused["steps"] == 0
    assert took[("setup", REFUSED)] < shared["start_s"], (took[("setup", REFUSED)], shared["start_s"])
    assert_nothing_left(*engine_processes(data), bystander)


INERT = textwrap.dedent(
    """
    import os, sys
    if __name__ == "__main__":
        from vllm import LLM, SamplingParams
        from pytest_enginedead.compat import llm_api, llm_config
        llm = LLM(**llm_config.llm_kwargs(sys.argv[1], 2))
        out = llm.generate([{"prompt_token_ids": [5, 6, 7]}], SamplingParams(max_tokens=2, ignore_eos=True))
        assert len(out[0].outputs[0].token_ids) == 2
        llm_api.shutdown_llm(llm)
    """
)


@pytest.mark.parametrize(
    ("env", "patched", "logged"),
    [
        ({}, False, None),
        # the metrics off: asked for, a refused guard still brings them (its engine core times the
        # steps, to show the guard off where it was asked for: tests/unit/vllm_plugin/test_guard.py)
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "soon", "ENGINEDEAD_METRICS": "0"}, False,
         "ENGINEDEAD_GUARD_HANG_S='soon' is not a number of seconds above 0; the guard stays off"),
    ],
    ids=["unset", "bad-value"],
)
def test_unset_or_bad_the_guard_touches_nothing_in_vllm(
    tmp_path: Path, env: dict[str, str], patched: bool, logged: str | None
) -> None:
    """A plain vLLM with the plugin installed, no harness: the engine core reports which of
    the attributes the guard could replace are replaced (none), and the engine works."""
    from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL

    script = tmp_path / "inert.py"
    script.write_text(INERT)
    report = tmp_path / "patches.json"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ENGINEDEAD_")}
    # no harness here to give vLLM's ipc sockets and temp files a home it removes; without
    # one they stay in /tmp
    ipc = tempfile.mkdtemp(prefix="ed-ipc-")
    try:
        done = subprocess.run(
            [sys.executable, str(script), BUNDLED_MODEL],
            env={**clean, **llm_config.engine_environment(), **env,
                 **llm_config.scratch_environment(ipc, clean),
                 "ENGINEDEAD_REPORT_PATCHES": str(report)},
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )
    finally:
        shutil.rmtree(ipc, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(report.read_text()) == {
        "MultiprocExecutor.collective_rpc": patched,
        "MessageQueue.ReadTimeoutWithWarnings": patched,
    }
    if logged:
        assert sum(logged in line for line in done.stderr.splitlines() + done.stdout.splitlines()) == 1
