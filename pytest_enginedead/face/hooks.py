"""Hooks a conftest.py can implement."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(firstresult=True)
def pytest_enginedead_policy(config: pytest.Config) -> Any:
    """Return the timeout policy for this run (any object with ``timeout_s``).

    Consulted when no ``--enginedead-policy`` (flag, env or ini) is given; implement
    it in a conftest.py at the rootdir.  Return None to keep the default.
    """
