"""A model directory and its ``config.json``, held against what vLLM needs."""

from __future__ import annotations

from pathlib import Path

from pytest_enginedead.logic.modelconfig import BUNDLED_MODEL, validate_model


def test_bundled_model_is_valid() -> None:
    """The default model directory passes the same validation as a user's."""
    assert validate_model(BUNDLED_MODEL) == str(Path(BUNDLED_MODEL).resolve())
