"""Kept for downstream code, deprecated: the API server lives in ``harness.server`` (start, watch,
stop), its clients in ``harness.clients``, and what a test holds in ``face.handles``."""

from __future__ import annotations

import warnings

from .face.handles import ServerHandle
from .harness.clients import ClientOutcome, describe_client_error
from .harness.server import (
           PROMPT_WORDS,
           START_LIMIT_S,
           Server,
           free_port,
           has_tokenizer,
           http_status,
           server_command,
)

warnings.warn(
    "pytest_enginedead.server is deprecated: import ServerHandle from pytest_enginedead (or "
    "pytest_enginedead.face.handles), ClientOutcome and describe_client_error from "
    "pytest_enginedead.harness.clients, and the rest from pytest_enginedead.harness.server",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["PROMPT_WORDS", "START_LIMIT_S", "ClientOutcome", "Server", "ServerHandle",
           "describe_client_error",
           "free_port", "has_tokenizer", "http_status", "server_command"]
