"""The ``pytest_enginedead_policy`` hook a conftest.py implements: the policy it gives, and
what it must not give."""

from __future__ import annotations

import pytest

from tests.support import examples
from tests.support.doors import Case, assert_bad_input_is_one_line, hook
from tests.support.downstream import Downstream


@pytest.fixture(autouse=True)
def _no_deadline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm-stock reads VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS; keep it at its 300 s default."""
    monkeypatch.delenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", raising=False)


def test_policy_hook_in_conftest(downstream: Downstream) -> None:
    """``pytest_enginedead_policy`` supplies the policy; --enginedead-policy still wins."""
    downstream.copy(examples.POLICIES, examples.INVARIANTS, examples.POLICY_HOOK)
    hooked = downstream.run("-rA")
    hooked.stdout.fnmatch_lines(["enginedead: policy=mysame (pytest_enginedead_policy hook), *"])
    hooked.assert_outcomes(passed=2, failed=1)
    hooked.stdout.fnmatch_lines(["FAILED test_marked.py::test_cpu_gt_gpu - *"])
    flag = downstream.run("--enginedead-policy=reference")
    flag.stdout.fnmatch_lines(["enginedead: policy=reference (command line), *"])
    flag.assert_outcomes(passed=3)


def test_policy_hook_returning_a_non_policy_is_a_usage_error(downstream: Downstream) -> None:
    """A hook that returns something without timeout_s stops the run, saying so."""
    downstream.pytester.makeconftest("def pytest_enginedead_policy(config):\n    return 300\n")
    result = downstream.copy(examples.INVARIANTS).run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest_enginedead_policy returned int, which has no callable timeout_s*"])


# --- bad input at this door: one line each (conventions: tests/support/doors.py) -------------------------

CASES = [
    # --- the pytest_enginedead_policy hook -------------------------------------------------------
    Case("hook-raises", ("pytest_enginedead_policy hook (", "conftest.py:", "raised RuntimeError: boom"),
         files=hook("raise RuntimeError('boom')")),
    Case("hook-calibrated-bad-batch", ("pytest_enginedead_policy hook", "raised ValueError: "
                                       "TimeoutPolicy.calibrated: bad calibration sample: batch 0"),
         files=hook("return TimeoutPolicy.calibrated({0: 1.0})")),
    Case("hook-calibrated-bad-step", ("TimeoutPolicy.calibrated: bad calibration sample: batch 8, step "
                                      "'fast' s is not a finite number >= 0",),
         files=hook("return TimeoutPolicy.calibrated({8: 'fast'})")),
    Case("hook-calibrated-not-samples", ("TimeoutPolicy.calibrated: samples must be a",),
         files=hook("return TimeoutPolicy.calibrated(42)")),
    Case("hook-calibrated-infinite-headroom", ("headroom must be > 0 and finite, got inf",),
         files=hook("return TimeoutPolicy.calibrated({8: 1.0}, headroom=float('inf'))")),
    Case("hook-exits", ("pytest_enginedead_policy hook (", "raised SystemExit: 3"),
         files=hook("sys.exit(3)")),
    Case("hook-attribute-raises", ("returned a Sly; reading its timeout_s raised RuntimeError: no",),
         files=hook("""
             class Sly:
                 @property
                 def timeout_s(self):
                     raise RuntimeError("no")
             return Sly()
         """)),
    Case("hook-returns-a-number", ("pytest_enginedead_policy returned int, which has no callable timeout_s",),
         files=hook("return 42")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line(
    downstream: Downstream, tripwire: list[str], monkeypatch: pytest.MonkeyPatch, case: Case
) -> None:
    """Each of the policy hook's bad inputs: one line naming the value and its source, before any engine."""
    assert_bad_input_is_one_line(downstream, monkeypatch, case)
