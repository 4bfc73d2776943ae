"""Real vLLM CPU engines: the false death reproduced and caught, genuine deaths let through.

Each test runs pytest in a subprocess as a downstream repo would
(``pytest -p enginedead``) and reads its JSON report.  Engines are the expensive
part (~15-45 s each), so every inner run shares them: one per distinct config.
After every run the engine processes it started (from the report, pinned by pid
and creation time) must be gone, with their ``/dev/shm`` segments, while a decoy
process titled ``VLLM::Worker`` that the harness did not start lives on.
"""

from __future__ import annotations

import json
import os
import re
from xml.etree import ElementTree
from pathlib import Path
from typing import Any

import psutil
import pytest

from pytest_enginedead import compat
from pytest_enginedead.report import SCHEMA_PATH

jsonschema = pytest.importorskip("jsonschema")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(compat.installed_version() is None, reason="vLLM is not installed"),
]


def run_engines(
    pytester: pytest.Pytester, source: str, *args: str, timeout: float = 600, dynamic: int = 0
) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run ``source`` as a downstream test module under ``pytest -p enginedead``."""
    pytester.makepyfile(test_downstream=source)
    report = pytester.path / "enginedead-report.json"
    result = pytester.runpytest_subprocess(
        "-p", "enginedead", "-p", "timeout", f"--enginedead-report={report}", "-rA", *args,
        timeout=timeout,
    )
    data = json.loads(report.read_text())
    jsonschema.validate(data, json.loads(Path(SCHEMA_PATH).read_text()))
    # one engine per distinct configuration: sharing worked, no death forced a restart
    # (``dynamic``: engines the factory fixture made, which collection cannot plan)
    assert data["engines_started"] == data["configurations"] + dynamic, data["engines"]
    return result, data


def assert_nothing_left(data: dict[str, Any], decoy: psutil.Process) -> None:
    """Every engine process the run started is gone, with its shared memory."""
    assert data["engines"], "the run started no engine"
    for engine in data["engines"]:
        assert engine["pids"], engine
        for ref in engine["pids"]:
            try:
                proc = psutil.Process(ref["pid"])
                same = abs(proc.create_time() - ref["create_time"]) < 0.01
                assert not same or proc.status() == psutil.STATUS_ZOMBIE, (
                    f"engine process {ref['pid']} ({proc.cmdline()}) outlived the run"
                )
            except psutil.NoSuchProcess:
                pass
        for path in engine["shm"]:
            assert not os.path.exists(path), f"{path} leaked"
    assert decoy.is_running() and decoy.status() != psutil.STATUS_ZOMBIE


STOCK_VS_POLICY = """
import pytest
from pytest_enginedead import assert_no_false_death

pytestmark = pytest.mark.enginedead_inject(slow_s_per_seq=0.05)


@pytest.mark.enginedead_batch_sizes(2, 64)
@pytest.mark.enginedead_timeout(2)
def test_stock_deadline(vllm_engine):
    with assert_no_false_death(vllm_engine):
        out = vllm_engine.generate(max_tokens=4)
    assert len(out) == vllm_engine.batch_size
    assert all(len(tokens) == 4 for tokens in out)


@pytest.mark.enginedead_batch_sizes(64)
@pytest.mark.enginedead_invariants("headroom", headroom=3)
def test_reference_policy(vllm_engine):
    with assert_no_false_death(vllm_engine):
        out = vllm_engine.generate(max_tokens=4)
    assert len(out) == 64
    steps = vllm_engine.step_times()
    assert steps and max(s.batch_size for s in steps) == 64
    assert all(s.seconds is not None and s.seconds > 0 for s in steps)
    assert vllm_engine.timeout_s >= 1240
"""


@pytest.mark.smoke
def test_stock_deadline_false_death_caught_and_policy_survives(
    pytester: pytest.Pytester, decoy: psutil.Process
) -> None:
    """Stock 2 s deadline, busy 0.05 s/seq: batch 2 passes, batch 64 is a false death;
    the reference policy survives batch 64 with a non-empty step record."""
    junit = pytester.path / "junit.xml"
    result, data = run_engines(pytester, STOCK_VS_POLICY, f"--junitxml={junit}")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "PASSED test_downstream.py::test_stock_deadline[[]bs2[]]",
            "PASSED test_downstream.py::test_reference_policy[[]bs64[]]",
            "FAILED test_downstream.py::test_stock_deadline[[]bs64[]]*false engine d*",
        ]
    )
    out = result.stdout.str()
    # the evidence a person needs at 3 a.m.
    for needle in (
        "false engine death: vLLM raised EngineDeadError while its worker was still computing",
        "VLLM::Worker (pid ",
        "% of a core over the last",
        ", had run ",
        "deadline:   2 s (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=2, set from the enginedead_timeout marker)",
        "policy:     reference allows 1240 s at batch 64 on CPU",
        "worker stack (innermost first):",
        "in burn",
        "what to change:",
    ):
        assert needle in out, needle
    assert re.search(r"step:       step \d+, batch \d+, had run [2-9]\.\d s and was still running", out)
    assert "During handling of the above exception" not in out
    # one engine for both stock-deadline batches (same deadline), one for the policy
    assert data["engines_started"] == 2
    stock = next(e for e in data["engines"] if e["deadline_s"] == 2)
    assert stock["batch_size"] == 64 and stock["false_deaths"] == 1
    policy = next(e for e in data["engines"] if e["deadline_s"] >= 1240)
    assert policy["false_deaths"] == 0 and policy["steps"] > 0
    verdicts = {t["nodeid"].split("::")[-1]: t["verdict"] for t in data["tests"] if t["when"] == "call"}
    assert verdicts == {
        "test_stock_deadline[bs2]": None,
        "test_stock_deadline[bs64]": "SLOW",
        "test_reference_policy[bs64]": None,
    }
    slow = next(t for t in data["tests"] if t["verdict"] == "SLOW")["deaths"][0]
    assert slow["verdict_s"] < 0.5, "the verdict must come fast"
    # the JSON report, junitxml properties and the terminal summary tell one story
    props = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ElementTree.parse(junit).getroot().iter("testcase")
    }
    for test in (t for t in data["tests"] if t["when"] == "call"):
        mine = props[test["nodeid"].split("::")[-1]]
        assert mine["enginedead_batch_size"] == str(test["batch_size"])
        assert float(mine["enginedead_deadline_s"]) == test["timeout_s"]
        assert mine["enginedead_verdict"] == ("false death" if test["verdict"] == "SLOW" else "ok")
        assert mine["enginedead_step_max_s"] == str(test["step_max_s"])
    for engine in data["engines"]:
        summary = [ln for ln in out.splitlines() if ln.lstrip().startswith(f"{engine['batch_size']} ")
                   and f"{engine['deadline_s']:g}s" in ln]
        assert summary, engine["label"]
        assert summary[0].split()[4] == f"{engine['step_max_s']:.3f}s"
        assert f"engines started: {data['engines_started']};" in out
    assert_nothing_left(data, decoy)


GENUINE_DEATHS = """
import pytest
from pytest_enginedead import assert_no_false_death, Verdict


@pytest.mark.enginedead_batch_sizes(4)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(crash_at_step=2)
def test_crash(vllm_engine):
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_engine):
            vllm_engine.generate(max_tokens=8)
    assert type(info.value).__name__ == "EngineDeadError"
    assert vllm_engine.deaths[-1]["verdict"] == Verdict.DEAD.name


@pytest.mark.enginedead_batch_sizes(4)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(hang_at_step=2)
def test_hang(vllm_engine):
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_engine):
            vllm_engine.generate(max_tokens=8)
    assert type(info.value).__name__ == "EngineDeadError"
    assert vllm_engine.deaths[-1]["verdict"] == Verdict.HUNG.name
"""


@pytest.mark.smoke
def test_genuine_deaths_propagate(pytester: pytest.Pytester, decoy: psutil.Process) -> None:
    """A crashed worker (DEAD) and a hung one (HUNG) are not false deaths: the original
    EngineDeadError reaches the test unchanged."""
    result, data = run_engines(pytester, GENUINE_DEATHS)
    result.assert_outcomes(passed=2)
    assert data["engines_started"] == 2
    assert sum(e["genuine_deaths"] for e in data["engines"]) == 2
    assert sum(e["false_deaths"] for e in data["engines"]) == 0
    assert_nothing_left(data, decoy)


REAL_COMPUTE = """
import pytest
from pytest_enginedead import assert_no_false_death


@pytest.mark.enginedead_batch_sizes(2, 64)
@pytest.mark.enginedead_timeout(1)
def test_real_compute(vllm_engine, engine_batch_size):
    # a step's cost follows the tokens it processes: 2 x 1 token is milliseconds,
    # 64 x 64 tokens (one 4096-token step) is seconds even on a fast AVX-512 core
    prompt_len = 1 if engine_batch_size == 2 else 64
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=4, prompt_len=prompt_len)
"""


def test_real_compute_outlives_short_deadline(pytester: pytest.Pytester, decoy: psutil.Process) -> None:
    """No injection: a 12-layer dummy Llama under a 1 s deadline survives a small batch
    and dies on a large one while the worker computes — SLOW, from real compute."""
    result, data = run_engines(
        pytester, REAL_COMPUTE, f"--enginedead-model={FIXTURES / 'heavy-llama'}"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_downstream.py::test_real_compute[[]bs64[]]*false engine d*"])
    out = result.stdout.str()
    assert "in burn" not in out  # no injected burn: the worker was in the model
    assert "worker stack (innermost first):" in out
    assert data["engines_started"] == 1
    assert data["engines"][0]["false_deaths"] == 1
    assert data["engines"][0]["injection"] == "none"
    assert_nothing_left(data, decoy)


FACTORY = """
from pytest_enginedead import Injection


def test_factory(vllm_engine_factory):
    engine = vllm_engine_factory(4, timeout_s=30, inject={"slow_s_per_seq": 0.01}, max_model_len=256)
    assert engine.timeout_s == 30 and engine.batch_size == 4
    out = engine.generate(max_tokens=3, prompt_len=2)
    assert [len(t) for t in out] == [3, 3, 3, 3]
    steps = engine.step_times()
    assert steps and all(s.seconds >= 0.01 * s.batch_size for s in steps)
    assert all(p.alive for p in engine.liveness().values())
"""


def test_factory_engine_with_explicit_arguments(pytester: pytest.Pytester, decoy: psutil.Process) -> None:
    """vllm_engine_factory: explicit deadline, faults and engine args; stopped afterwards."""
    result, data = run_engines(pytester, FACTORY, dynamic=1)
    result.assert_outcomes(passed=1)
    (engine,) = data["engines"]
    assert engine["deadline_s"] == 30 and engine["batch_size"] == 4
    assert engine["deadline_source"] == "vllm_engine_factory(timeout_s=...)"
    assert "max_model_len=256" in engine["label"]
    assert_nothing_left(data, decoy)


def test_malformed_and_unknown_model_are_usage_errors(pytester: pytest.Pytester) -> None:
    """A broken config.json or an architecture vLLM lacks: one line naming the file, exit 4."""
    pytester.makepyfile(test_x="def test_e(vllm_engine):\n    pass\n")
    for model, needle in (
        ("bad-json", "bad-json/config.json is not valid JSON"),
        ("unknown-arch", "unknown-arch/config.json names architecture NoSuchModelForCausalLM"),
    ):
        result = pytester.runpytest_subprocess(
            "-p", "enginedead", f"--enginedead-model={FIXTURES / model}", timeout=120
        )
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert needle in result.stderr.str()
        assert "Traceback" not in result.stderr.str() + result.stdout.str()
