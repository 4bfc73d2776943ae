"""Hooks a conftest.py can implement."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(firstresult=True)
def pytest_enginedead_policy(config: pytest.Config) -> Any:
    """Return the timeout policy for this run (any object with ``timeout_s``).

    Consulted when no ``--enginedead-policy`` (flag, env or ini) is given, once, when the
    run is configured; implement it in the rootdir's conftest.py or a plugin.  One in a
    conftest.py pytest loads later, while collecting (a sub-directory's), is refused with a
    usage error.  Return None to keep the default.
    """
