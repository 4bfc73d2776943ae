"""Kept for downstream code: the start ledger lives in ``pytest_enginedead.harness.ledger``."""

from __future__ import annotations

from .contract.names import START_LEDGER_ENV, START_LEDGER_TAG_ENV
from .harness.ledger import read, record, summary

__all__ = ["START_LEDGER_ENV", "START_LEDGER_TAG_ENV", "read", "record", "summary"]
