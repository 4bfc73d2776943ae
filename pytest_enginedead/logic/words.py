"""Counts in what the commands and the plugin print: ``1 step``, ``2 steps``."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and ``noun``, the plural form (``nouns``, else ``noun + "s"``) unless it is one."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"
