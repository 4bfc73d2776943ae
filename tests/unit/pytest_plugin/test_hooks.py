"""The ``pytest_enginedead_policy`` hook a conftest.py implements: the policy it gives, and
what it must not give."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import examples
from tests.support.badinput import (
    PLAIN,
    USES_PLUGIN,
    Alike,
    Case,
    assert_alike_with_and_without_xdist,
    assert_bad_input_is_one_line,
    header,
    hook,
)
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


# --- bad input here: one line each (conventions: tests/support/badinput.py) ---------------------------------

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
    downstream: Downstream, no_engine: list[str], monkeypatch: pytest.MonkeyPatch, case: Case
) -> None:
    """Each of the policy hook's bad inputs: one line naming the value and its source, before any engine."""
    assert_bad_input_is_one_line(downstream, monkeypatch, case)


# --- 36.6: a hook in a conftest.py pytest loads while collecting -----------------------------------

#: a sub-directory's conftest.py whose hook gives the policy "subflat", and a test beside it
IN_A_SUB_DIRECTORY = {
    "sub/conftest.py": hook("""
        class Flat:
            name = "subflat"

            def timeout_s(self, backend, max_num_seqs, max_num_batched_tokens=None):
                return 900.0

        return Flat()
    """)["conftest.py"],
    "sub/test_sub.py": USES_PLUGIN,
}

ALIKE = [
    Alike("hook-in-a-sub-directory",
          ("enginedead: the pytest_enginedead_policy hook in sub/conftest.py came too "
           "late: pytest loaded it while collecting, after the run's policy was chosen "
           "(policy reference, default); a policy hook must live in the rootdir's "
           "conftest.py",),
          files=IN_A_SUB_DIRECTORY),
]


@pytest.mark.processes
@pytest.mark.parametrize("case", ALIKE, ids=[c.id for c in ALIKE])
def test_alike_with_and_without_xdist(
    downstream: Downstream, no_engine: list[str], stub_registry: Path, private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch, case: Alike,
) -> None:
    """A policy hook pytest loads after the policy was chosen (a sub-directory's conftest.py, found
    while collecting) would be ignored: one line saying where hooks must live, exit 4, the same with
    -n 2 (where the workers collect and the controller ends the run in the same line)."""
    assert_alike_with_and_without_xdist(downstream, stub_registry, private_tmp, monkeypatch, case)


def test_a_sub_directorys_hook_given_on_the_command_line_is_honoured(
    downstream: Downstream, no_engine: list[str]
) -> None:
    """``pytest sub`` loads sub/conftest.py before the run is configured: its hook gives the policy;
    so does a --enginedead-policy, which no late hook is refused for (none is asked)."""
    for name, text in IN_A_SUB_DIRECTORY.items():
        (downstream.path / name).parent.mkdir(parents=True, exist_ok=True)
        (downstream.path / name).write_text(text)
    (downstream.path / "test_case.py").write_text(PLAIN)
    sub = downstream.run("sub")
    sub.assert_outcomes(passed=1)
    assert header(sub).startswith("enginedead: policy=subflat (pytest_enginedead_policy hook), ")
    flag = downstream.run("--enginedead-policy=reference")
    flag.assert_outcomes(passed=2)
