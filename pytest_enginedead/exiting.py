"""Kept for downstream code, deprecated, removed in 0.4.0: the serving process's exit codes live in
``contract.names``, the code that exits with them (inside the API server) in ``vllm_plugin.exiting``."""

from __future__ import annotations

import warnings

from .contract.names import EXIT_DEAD, EXIT_ENV, EXIT_HUNG

warnings.warn(
    "pytest_enginedead.exiting is deprecated (removed in 0.4.0): import EXIT_DEAD, EXIT_ENV and "
    "EXIT_HUNG from pytest_enginedead.contract.names",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["EXIT_DEAD", "EXIT_ENV", "EXIT_HUNG"]
