"""What operators' supervisors see of real servers: the enginedead probe and the exit status."""

from __future__ import annotations

import psutil
import pytest

from tests.support import examples
from tests.support.downstream import Downstream, assert_nothing_left, engine_processes

pytestmark = pytest.mark.engine


def test_probe_and_exit_status_on_real_servers(downstream: Downstream, bystander: psutil.Process) -> None:
    """Two guarded servers at once: the probe stays alive through slow steps (>= 3 x the 2 s
    deadline) and turns in a probe begun within hang_s + a round of probing of a hang; the
    hung server exits with EXIT_HUNG.  (An unguarded false death with the opt-in exits with
    EXIT_DEAD: test_server.py::test_server_false_death, on the server it starts anyway.)
    The slow server is vllm_server_factory's with explicit arguments: its deadline, batch and an
    extra keyword that becomes the server's --flag (--max-model-len 256), alive after its clients."""
    result = downstream.copy(examples.OPERATORS).run("-rA", "-s", plugins=["timeout"], in_subprocess=True,
                                                     report=True)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["probe: * probes, wall max *; hang found * after it began (hang_s 3)*"])
    data = result.report
    assert data is not None
    assert data["engines_started"] == 2
    assert any("max_model_len=256" in e["label"] for e in data["engines"]), data["engines"]
    assert_nothing_left(*engine_processes(data), bystander)


def test_the_conformance_suite_holds_a_setting_to_both_states(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, bystander: psutil.Process
) -> None:
    """Two settings of `enginedead probe`, each against a real SLOW and a real HUNG guarded
    server (hang_s 3 s, a 20 s window): neither kills the slow engine; the tight one (2 s
    period, 2 failures) finds the hang, the Kubernetes default (10 s, 3 failures) cannot
    within 20 s and fails, saying so."""
    monkeypatch.setenv("ENGINEDEAD_PROBE_SETTINGS", "tight=2/1/2,k8s=10/1/3")
    monkeypatch.setenv("ENGINEDEAD_PROBE_WINDOW", "20")
    monkeypatch.setenv("ENGINEDEAD_PROBE_HANG_S", "3")
    result = pytester.runpytest_subprocess("-p", "enginedead", "-p", "no:cacheprovider", "-rA",
                                           "--pyargs", "pytest_enginedead.conformance")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([
        "PASSED *test_a_slow_engine_is_never_killed[[]tight[]]",
        "PASSED *test_a_slow_engine_is_never_killed[[]k8s[]]",
        "PASSED *test_a_hung_engine_is_found[[]tight[]]",
        "FAILED *test_a_hung_engine_is_found[[]k8s[]]*",
    ])
    result.stdout.fnmatch_lines(["*did not find a worker hung inside its step within 20 s*"])
    assert bystander.is_running()
