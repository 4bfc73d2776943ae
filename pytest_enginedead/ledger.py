"""Kept for downstream code, deprecated, removed in 0.4.0: the start ledger lives in
``pytest_enginedead.harness.engines.ledger``, its variables in ``pytest_enginedead.contract.names``."""

from __future__ import annotations

import warnings

from .contract.names import START_LEDGER_ENV, START_LEDGER_TAG_ENV
from .harness.engines.ledger import read, record, summary

warnings.warn(
    "pytest_enginedead.ledger is deprecated (removed in 0.4.0): import read, record and summary "
    "from pytest_enginedead.harness.engines.ledger, START_LEDGER_ENV and START_LEDGER_TAG_ENV "
    "from pytest_enginedead.contract.names",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["START_LEDGER_ENV", "START_LEDGER_TAG_ENV", "read", "record", "summary"]
