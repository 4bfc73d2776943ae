"""The ``enginedead_invariants`` marker in a downstream repo: the policy's invariants judged
around each test's call."""

from __future__ import annotations

import pytest

from tests.support import examples
from tests.support.downstream import Downstream

VALID = "cpu_gt_gpu, grows_with_batch, capped, headroom, not_below_stock"


@pytest.fixture(autouse=True)
def _no_deadline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm-stock reads VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS; keep it at its 300 s default."""
    monkeypatch.delenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", raising=False)


# --- the marker, in a downstream repo --------------------------------------------------

def test_marker_passes_under_reference(downstream: Downstream) -> None:
    """The default (reference) policy passes all three."""
    result = downstream.copy(examples.INVARIANTS).run("-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["enginedead: policy=reference (default), *"])


def test_marker_fails_under_vllm_stock_with_the_numbers(downstream: Downstream) -> None:
    """vllm-stock: cpu_gt_gpu and grows_with_batch fail with their numbers; capped passes."""
    result = downstream.copy(examples.INVARIANTS).run("--enginedead-policy=vllm-stock", "-rA")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_cpu_gt_gpu _*",
            "policy vllm-stock breaks 1 invariant:",
            "  cpu_gt_gpu: timeout_s(CPU, 1) = 300.0 s is not greater than timeout_s(GPU, 1) = 300.0 s; *",
            "*_ test_grows_with_batch _*",
            "policy vllm-stock breaks 6 invariants:",
            "  grows_with_batch: timeout_s(CPU, 1) = 300.0 s and timeout_s(CPU, 65536) = 300.0 s: "
            "it never grows with the batch",
            "  grows_with_batch: timeout_s(GPU, 1) = 300.0 s and timeout_s(GPU, 65536) = 300.0 s: "
            "it never grows with the batch",
        ]
    )
    result.stdout.fnmatch_lines(["PASSED test_marked.py::test_capped"])
    assert "Traceback" not in result.stdout.str()


def test_custom_module_attr_policy(downstream: Downstream) -> None:
    """A policy module beside the tests, by module:attr: one that holds, one that breaks."""
    downstream.copy(examples.POLICIES, examples.INVARIANTS)
    good = downstream.run("--enginedead-policy=mypolicies:good")
    good.assert_outcomes(passed=3)
    good.stdout.fnmatch_lines(["enginedead: policy=mygood (command line), *"])
    same = downstream.run("--enginedead-policy=mypolicies:same", "-rA")
    same.assert_outcomes(passed=2, failed=1)
    same.stdout.fnmatch_lines(
        [
            "policy mysame breaks 1 invariant:",
            "  cpu_gt_gpu: timeout_s(CPU, 1) = 301.0 s is not greater than timeout_s(GPU, 1) = 301.0 s; *",
            "FAILED test_marked.py::test_cpu_gt_gpu - *",
        ]
    )


def test_headroom_marker_with_step_times(downstream: Downstream) -> None:
    """3 × 300 s fits under the reference's 1240 s at batch 64; 5 × does not; stock fails both."""
    ref = downstream.copy(examples.HEADROOM).run("-rA")
    ref.assert_outcomes(passed=1, failed=1)
    ref.stdout.fnmatch_lines(
        [
            "  headroom: timeout_s(CPU, 64) = 1240.0 s is only 4.13 x the measured step of "
            "300.000 s at batch 64; needs >= 5 x (1500.0 s)",
            "PASSED test_headroom.py::test_default_headroom",
            "FAILED test_headroom.py::test_five_x - *",
        ]
    )
    stock = downstream.run("--enginedead-policy=vllm-stock")
    stock.assert_outcomes(failed=2)
    stock.stdout.fnmatch_lines(
        ["  headroom: timeout_s(CPU, 64) = 300.0 s is only 1.00 x *needs >= 3 x (900.0 s)"]
    )


def test_marker_checks_the_configured_batch_sizes(downstream: Downstream) -> None:
    """--enginedead-batch-sizes adds sizes to the grid: a cap_s between them is caught there."""
    result = downstream.copy(examples.CAPPED_AT_1000).run("--enginedead-batch-sizes=8,41")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["  capped: timeout_s(CPU, 41) = 1010.0 s is above the cap of 1000.0 s"])


def test_unknown_invariant_fails_only_that_test(downstream: Downstream) -> None:
    """An unknown name fails its test, naming it and listing the valid ones; others run."""
    result = downstream.copy(examples.UNKNOWN_INVARIANT).run("-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"@pytest.mark.enginedead_invariants: unknown invariant 'fast_enough'; valid: {VALID}",
            "PASSED *::test_known",
        ]
    )
    assert "Traceback" not in result.stdout.str()
