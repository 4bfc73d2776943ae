"""Kept for downstream code, deprecated, removed in 0.4.0: the API server lives in
``harness.engines.server`` (start, watch, stop), its clients in ``harness.load.clients``, and what a
test holds in ``pytest_plugin.handles``."""

from __future__ import annotations

import warnings

from .harness.engines.server import (
    PROMPT_WORDS,
    START_LIMIT_S,
    Server,
    free_port,
    has_tokenizer,
    http_status,
    server_command,
)
from .harness.load.clients import ClientOutcome, describe_client_error
from .pytest_plugin.handles import ServerHandle

warnings.warn(
    "pytest_enginedead.server is deprecated (removed in 0.4.0): import ServerHandle from "
    "pytest_enginedead (or pytest_enginedead.pytest_plugin.handles), ClientOutcome and "
    "describe_client_error from pytest_enginedead.harness.load.clients, and the rest from "
    "pytest_enginedead.harness.engines.server",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["PROMPT_WORDS", "START_LIMIT_S", "ClientOutcome", "Server", "ServerHandle",
           "describe_client_error",
           "free_port", "has_tokenizer", "http_status", "server_command"]
