"""The start ledger: one line per engine start from every process of a run, totalled."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from pytest_enginedead.contract.names import START_LEDGER_ENV, START_LEDGER_TAG_ENV
from pytest_enginedead.harness.engines import ledger


def test_nothing_is_written_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(START_LEDGER_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    ledger.record("engine", "bs8, model tiny-llama", 12.5, restart=False)
    assert list(tmp_path.iterdir()) == []


def _start_in_a_child(path: str, i: int) -> None:
    import os

    os.environ[START_LEDGER_ENV] = path
    os.environ[START_LEDGER_TAG_ENV] = f"tests/test_x.py::test_{i % 2}"
    ledger.record("server" if i % 3 == 0 else "engine", f"bs{i}", 10.0 + i, restart=i % 4 == 0)


@pytest.mark.processes
def test_starts_from_many_processes_are_totalled(tmp_path: Path) -> None:
    """Sixteen processes append at once: every line whole, the totals and origins right."""
    path = str(tmp_path / "ledger.jsonl")
    procs = [multiprocessing.get_context("spawn").Process(target=_start_in_a_child, args=(path, i))
             for i in range(16)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    entries = ledger.read(path)
    assert sorted(e["label"] for e in entries) == sorted(f"bs{i}" for i in range(16))
    lines = ledger.summary(entries)
    total = sum(10.0 + i for i in range(16))
    assert lines[0] == (
        f"engine starts, every run included: 16 in {total:.0f}s (engine 10 in "
        f"{sum(10.0 + i for i in range(16) if i % 3):.0f}s, server 6 in "
        f"{sum(10.0 + i for i in range(16) if i % 3 == 0):.0f}s); "
        "12 first starts of a configuration, 4 restarts after a death"
    )
    # the origin that started the most seconds first
    odd = sum(10.0 + i for i in range(16) if i % 2)
    assert lines[1] == f"  8 in {odd:.0f}s  tests/test_x.py::test_1"


def test_a_torn_line_and_a_missing_ledger_are_no_starts(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    assert ledger.read(str(path)) == [] and ledger.summary([]) == []
    path.write_text('{"kind": "engine", "label": "a", "start_s": 3, "restart": false}\n{"kind": "eng')
    assert [e["label"] for e in ledger.read(str(path))] == ["a"]


def test_a_ledger_that_cannot_be_written_says_so_and_the_start_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-dir" / "ledger.jsonl"
    monkeypatch.setenv(START_LEDGER_ENV, str(missing))
    ledger.record("engine", "bs8", 1.0, restart=False)
    err = capsys.readouterr().err
    assert err.startswith(
        f"enginedead: the start ledger {str(missing)!r} ({START_LEDGER_ENV}) was not written: ")
    assert len(err.splitlines()) == 1


class _Engine:
    """What ``ledger.started`` / ``ledger.stopped`` read of an engine."""

    class spec:  # stands in for the engine's spec (its label only)
        @staticmethod
        def label() -> str:
            return "bs8, model tiny-llama"

    kind = "engine"
    restart = False
    broken = False

    def __init__(self, start_s: float | None, import_s: float | None = None, deaths: int = 0) -> None:
        self.start_s, self.import_s, self.findings = start_s, import_s, [object()] * deaths


def test_stops_say_how_an_engine_ended_and_the_summary_counts_starts_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start carries the vLLM import it paid for; each stop says whether a death or a cut ended
    the engine; an engine that never started leaves no stop; the summary counts the starts."""
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(START_LEDGER_ENV, str(path))
    ledger.started(_Engine(20.0, import_s=6.5))
    ledger.stopped(_Engine(20.0, deaths=1), cut=False)
    ledger.started(_Engine(12.0, import_s=0.0))
    ledger.stopped(_Engine(12.0), cut=True)
    ledger.stopped(_Engine(None), cut=True)  # its start failed: no stop of its own
    entries = ledger.read(str(path))
    assert [(e.get("event", "start"), e.get("import_s"), e.get("died"), e.get("cut")) for e in entries] == [
        ("start", 6.5, None, None), ("stop", None, True, False), ("start", 0.0, None, None),
        ("stop", None, False, True)]
    assert all(e["pid"] == os.getpid() and e["t"] > 0 for e in entries)
    assert ledger.summary(entries)[0].startswith("engine starts, every run included: 2 in 32s")
