"""The serving process's exit status: a hang told from other deaths, after vLLM's own shutdown."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_enginedead.contract.decisions import GuardAction
from pytest_enginedead.contract.guardfiles import guard_state_path, write_guard_state
from pytest_enginedead.contract.names import EXIT_DEAD, EXIT_ENV, EXIT_HUNG
from pytest_enginedead.vllm_plugin import exiting
from tests.support.guards import in_step

# --- the serving side's exit status ----------------------------------------------------


def test_exit_status_tells_a_hang_from_other_deaths(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert exiting.death_exit(d, 9) == (EXIT_DEAD, "the engine died (EngineDeadError)")
    write_guard_state(guard_state_path(d, 10), in_step(in_step=False, ended=GuardAction.CAP))
    code, why = exiting.death_exit(d, 9)
    assert code == EXIT_DEAD and "outlived the guard's 1240 s cap" in why
    write_guard_state(guard_state_path(d, 12), in_step(
        pid=12, in_step=False, ended=GuardAction.END, busy_at=90.0, updated=93.5))
    code, why = exiting.death_exit(d, 9)
    assert code == EXIT_HUNG and "idle 3.5 s inside step 5 (hang_s 5 s)" in why
    assert exiting.death_exit(d, 8)[0] == EXIT_DEAD  # another server's states
    assert EXIT_HUNG != EXIT_DEAD and 0 not in (EXIT_HUNG, EXIT_DEAD)


def test_exit_opt_in_values() -> None:
    assert exiting.asked({EXIT_ENV: "1"}) and exiting.asked({EXIT_ENV: "on"})
    assert not exiting.asked({}) and not exiting.asked({EXIT_ENV: "0"})


class FakeClient:
    errored = True
    calls = 0

    def shutdown(self, timeout: float | None = None) -> None:
        type(self).calls += 1


def test_the_wrapped_shutdown_exits_with_the_status_after_vllms_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exiting, "_exited", False)
    wrapped = exiting._wrap_shutdown(FakeClient.shutdown, str(tmp_path))
    client = FakeClient()
    with pytest.raises(SystemExit) as info:
        wrapped(client)
    assert info.value.code == EXIT_DEAD and FakeClient.calls == 1
    wrapped(client)  # once only
    healthy = FakeClient()
    healthy.errored = False  # a SIGTERM's shutdown: no death when it began
    monkeypatch.setattr(exiting, "_exited", False)
    wrapped(healthy)
    healthy.errored = True  # the engine's death during that shutdown is not a death
    wrapped(healthy)
