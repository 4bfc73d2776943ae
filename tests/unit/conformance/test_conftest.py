"""The conformance suite's settings from the environment, checked before anything starts."""

from __future__ import annotations

import pytest


@pytest.mark.processes
@pytest.mark.parametrize(("env", "says"), [
    ({"ENGINEDEAD_PROBE_SETTINGS": "bad"},
     "ENGINEDEAD_PROBE_SETTINGS='bad' (from environment): 'bad' is not"),
    ({"ENGINEDEAD_PROBE_KIND": "ping"}, "ENGINEDEAD_PROBE_KIND='ping' (from environment): one of probe,"),
    ({"ENGINEDEAD_PROBE_WINDOW": "0"}, "ENGINEDEAD_PROBE_WINDOW='0' (from environment): not a number"),
])
def test_the_conformance_suite_refuses_bad_settings_with_exit_4(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], says: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = pytester.runpytest_subprocess("-p", "enginedead", "--pyargs", "pytest_enginedead.conformance")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [ln for ln in result.stderr.lines + result.stdout.lines if ln.startswith("ERROR")]
    assert len(errors) == 1 and says in errors[0], result.stdout.lines + result.stderr.lines
