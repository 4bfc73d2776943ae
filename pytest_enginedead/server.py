"""Kept for downstream code: the API server lives in ``harness.server`` (start, watch, stop),
its clients in ``harness.clients``, and what a test holds in ``face.handles``."""

from __future__ import annotations

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

__all__ = ["PROMPT_WORDS", "START_LIMIT_S", "ClientOutcome", "Server", "ServerHandle",
           "describe_client_error",
           "free_port", "has_tokenizer", "http_status", "server_command"]
