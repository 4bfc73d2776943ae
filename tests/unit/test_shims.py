"""The old import paths kept for downstream code: each still gives its names, and says where they
live now with a ``DeprecationWarning`` when imported."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

#: old module -> (the new modules its warning names, each with a name that lives there)
SHIMS = {
    "pytest_enginedead.server": [
        ("pytest_enginedead.harness.engines.server", "Server"),
        ("pytest_enginedead.harness.load.clients", "describe_client_error"),
        ("pytest_enginedead.pytest_plugin.handles", "ServerHandle"),
    ],
    "pytest_enginedead.ledger": [
        ("pytest_enginedead.harness.engines.ledger", "summary"),
        ("pytest_enginedead.contract.names", "START_LEDGER_ENV"),
    ],
    "pytest_enginedead.policy": [("pytest_enginedead.logic.timeouts.policies", "TimeoutPolicy")],
    "pytest_enginedead.exiting": [("pytest_enginedead.contract.names", "EXIT_HUNG")],
}


@pytest.mark.parametrize("old", sorted(SHIMS))
def test_an_old_path_warns_with_the_new_one_and_still_resolves(
    old: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported afresh; put back after the test
    said = rf"^{old} is deprecated \(removed in 0\.4\.0\): import "
    with pytest.warns(DeprecationWarning, match=said) as caught:
        module = importlib.import_module(old)
    [warning] = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    for new, name in SHIMS[old]:
        assert new in str(warning.message)
        assert getattr(module, name) is getattr(importlib.import_module(new), name)
    assert module.__all__ and all(hasattr(module, name) for name in module.__all__)


@pytest.mark.processes
def test_a_script_that_imports_an_old_path_is_told_by_default() -> None:
    """Python shows a ``DeprecationWarning`` only where ``__main__`` caused it: the warning names
    the importing line (not importlib's frames), so a script's own import is told without ``-W``."""
    done = subprocess.run([sys.executable, "-c", "import pytest_enginedead.policy"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("<string>:1: DeprecationWarning: pytest_enginedead.policy is deprecated (removed in 0.4.0): "
            "import from pytest_enginedead.logic.timeouts.policies") in done.stderr
    quiet = subprocess.run([sys.executable, "-c", "import pytest_enginedead.logic.timeouts.policies"],
                           capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and "Deprecat" not in quiet.stderr


def test_a_renamed_public_name_warns_and_is_the_new_one() -> None:
    """``Instructions`` says what it holds now: ``DeadlineAndFaults``."""
    import pytest_enginedead

    with pytest.warns(DeprecationWarning, match=r"pytest_enginedead.Instructions is deprecated \(removed in "
                      r"0\.4\.0\): it is pytest_enginedead.DeadlineAndFaults"):
        old = pytest_enginedead.Instructions
    assert old is pytest_enginedead.DeadlineAndFaults
