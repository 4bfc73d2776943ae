"""Every engine start of a tree of runs, in one file: ``ENGINEDEAD_START_LEDGER``.

A suite that runs pytest inside pytest (pytester, ``enginedead check``, xdist workers)
starts engines in processes its own report never sees.  With the variable naming a file,
every engine or server the harness starts, in any process that inherits it, appends one
JSON line there; ``summary`` totals them, so that the outermost run can say how many
engines it took, what they cost, and which of its tests started them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from ..contract.names import START_LEDGER_ENV, START_LEDGER_TAG_ENV


def record(kind: str, label: str, start_s: float, restart: bool) -> None:
    """Append this start to the ledger, when there is one; a write that fails says so once."""
    path = os.environ.get(START_LEDGER_ENV)
    if not path:
        return
    entry = {
        "kind": kind,
        "label": label,
        "start_s": round(start_s, 2),
        "restart": restart,
        "pid": os.getpid(),
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
        "tag": os.environ.get(START_LEDGER_TAG_ENV, ""),
    }
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())  # one write: lines never interleave
        finally:
            os.close(fd)
    except OSError as exc:
        print(f"enginedead: the start ledger {path!r} ({START_LEDGER_ENV}) was not written: {exc}",
              file=sys.stderr)


def read(path: str) -> list[dict[str, Any]]:
    """The ledger's entries (none when it does not exist; a torn last line is skipped)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def summary(entries: Iterable[Mapping[str, Any]], top: int = 5) -> list[str]:
    """Terminal lines: the starts in all, by kind, and the origins that started the most."""
    rows = list(entries)
    if not rows:
        return []
    total = sum(float(r["start_s"]) for r in rows)
    restarts = sum(1 for r in rows if r.get("restart"))
    kinds: dict[str, list[float]] = {}
    origins: dict[str, list[float]] = {}
    for r in rows:
        kinds.setdefault(str(r["kind"]), []).append(float(r["start_s"]))
        origins.setdefault(str(r.get("tag") or r.get("test") or "?"), []).append(float(r["start_s"]))
    by_kind = ", ".join(f"{k} {len(v)} in {sum(v):.0f}s" for k, v in sorted(kinds.items()))
    lines = [f"engine starts, every run included: {len(rows)} in {total:.0f}s ({by_kind}); "
             f"{len(rows) - restarts} first starts of a configuration, {restarts} restarts after a death"]
    for origin, secs in sorted(origins.items(), key=lambda kv: -sum(kv[1]))[:top]:
        lines.append(f"  {len(secs)} in {sum(secs):.0f}s  {origin}")
    return lines
