"""Every engine start of a tree of runs, in one file: ``ENGINEDEAD_START_LEDGER``.

A suite that runs pytest inside pytest (pytester, ``enginedead check``, xdist workers)
starts engines in processes its own report never sees.  With the variable naming a file,
every engine or server the harness starts, in any process that inherits it, appends one
JSON line there; ``summary`` totals them, so that the outermost run can say how many
engines it took, what they cost, and which of its tests started them.  Each stop appends a
line too (``"event": "stop"``: whether a death or a cut ended the engine), which
``bench/budget.py`` reads to say why each start was needed; ``summary`` counts starts only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ...contract.names import START_LEDGER_ENV, START_LEDGER_TAG_ENV


def record(kind: str, label: str, start_s: float, restart: bool, import_s: float | None = None) -> None:
    """Append this start to the ledger, when there is one; a write that fails says so once.

    ``import_s``: the part of ``start_s`` this process spent importing vLLM (0 once imported).
    """
    entry: dict[str, Any] = {
        "kind": kind,
        "label": label,
        "start_s": round(start_s, 2),
        "restart": restart,
    }
    if import_s is not None:
        entry["import_s"] = round(import_s, 2)
    _append(entry)


def started(engine: Any) -> None:
    """``record`` an engine (``base.EngineBase``) that has just started."""
    imported = getattr(engine, "import_s", None)  # offline engines: vLLM imported in this process
    record(engine.kind, engine.spec.label(), engine.start_s, engine.restart, imported)


def stopped(engine: Any, cut: bool) -> None:
    """Append the stop of an engine that started (``base.EngineBase``): ``died`` when a call on it
    failed (a death), ``cut`` when its run was interrupted (Ctrl-C, pytest-timeout).  An engine
    ended by its run's SIGKILL has no stop."""
    if engine.start_s is not None:
        died = bool(engine.broken or engine.findings)
        label = engine.spec.label()
        _append({"event": "stop", "kind": engine.kind, "label": label, "died": died, "cut": cut})


def _append(entry: dict[str, Any]) -> None:
    path = os.environ.get(START_LEDGER_ENV)
    if not path:
        return
    entry.update({
        "pid": os.getpid(),
        "t": round(time.time(), 2),
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
        "tag": os.environ.get(START_LEDGER_TAG_ENV, ""),
    })
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
    rows = [r for r in entries if r.get("event", "start") == "start"]
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
