"""Tests that need vLLM (most start real engines, ~15-45 s each): skipped without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_enginedead import compat

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = compat.vllm_missing_reason()
    if reason is None:
        return
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.skip(reason=reason))
