"""Kept for downstream code, deprecated: the start ledger lives in ``pytest_enginedead.harness.ledger``,
its variables in ``pytest_enginedead.contract.names``."""

from __future__ import annotations

import warnings

from .contract.names import START_LEDGER_ENV, START_LEDGER_TAG_ENV
from .harness.ledger import read, record, summary

warnings.warn(
    "pytest_enginedead.ledger is deprecated: import read, record and summary from "
    "pytest_enginedead.harness.ledger, START_LEDGER_ENV and START_LEDGER_TAG_ENV from "
    "pytest_enginedead.contract.names",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["START_LEDGER_ENV", "START_LEDGER_TAG_ENV", "read", "record", "summary"]
