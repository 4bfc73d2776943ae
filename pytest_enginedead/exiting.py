"""Kept for downstream code: the serving process's exit codes live in ``contract.names``, the
code that exits with them (inside the API server) in ``invllm.exiting``."""

from __future__ import annotations

from .contract.names import EXIT_DEAD, EXIT_ENV, EXIT_HUNG

__all__ = ["EXIT_DEAD", "EXIT_ENV", "EXIT_HUNG"]
