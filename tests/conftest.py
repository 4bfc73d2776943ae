"""Shared helpers: run pytest as a downstream repo would (``-p enginedead``)."""

from __future__ import annotations

import os
import pytest


@pytest.fixture
def downstream(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester whose runs load only what a downstream repo names: ``-p enginedead``."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    for name in list(os.environ):
        if name.startswith("ENGINEDEAD_"):
            monkeypatch.delenv(name)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In-process pytest with the plugin, as ``pytest -p enginedead ARGS``."""
    return pytester.runpytest("-p", "enginedead", *args)
