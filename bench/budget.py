"""The suite's budget: where its wall time goes, test by test and engine start by engine start.

    python bench/budget.py run DIR [--lock FILE] [--record] [-- PYTEST_ARGS]  run the suite, the breakdown
    python bench/budget.py report DIR [--imports FILE] [--json OUT]  the breakdown of a run made before
    python bench/budget.py record DIR [--results FILE]               record a run made before
    python bench/budget.py imports OUT [--lock FILE]                 time vLLM's imports (no engine)
    python bench/budget.py compare BEFORE.json AFTER.json            two breakdowns, test by test

``run`` runs ``pytest`` (default: the engine suite, ``-m engine -n 2 --dist loadgroup``) with the
start ledger (``ENGINEDEAD_START_LEDGER``: every engine start of the run and of the runs inside it,
and every stop) and a timeline of its tests (``tests/support/timeline.py``: each phase's worker,
start and stop) kept in DIR, with the command (``command.txt``), pytest's output (``pytest.log``)
and the machine and commit it ran (``run.json``), then prints the breakdown.  ``--lock FILE``
takes an flock on FILE for the run (a machine shared by several engine runs).

``--record`` (``make test-budget`` passes it) then records the finished run into
``bench/suite-results.json``, the file the benchmarks page's ``suite`` table is made from
(``bench/suite_figures.py``): the latest run on each kind of machine (CPU, vector ISA, cores), with
its date, commit, pytest arguments, vLLM release, the tests' outcomes, the wall measured and
projected, the engine starts and their seconds.  ``record DIR`` does the same for a run made before.
A run that did not finish (no pytest summary line) is not recorded: one line says why, exit 2.
``--results FILE`` records into FILE instead.

The breakdown:

- per test: its wall, its xdist worker, its engine starts and their seconds;
- per start: its configuration, its seconds, of them the vLLM import in the test's own process
  (recorded by the harness), why it exists (the first start of its configuration in its run, or a
  restart after a death) and how it ended (stopped at the end, a death, cut with its run by
  Ctrl-C or a timeout, or killed with it), and whether another run started the same
  configuration too;
- the totals: starts (first / restarts), their seconds, the vLLM import in them: the harness's
  own process (recorded) plus, from ``imports``, vLLM imported in each process a start spawns
  (engine core, one worker per rank, the API server for a server), measured on a quiet machine;
- the wall: measured (the run's own clock), the sum of the tests' walls ÷ 2, and the wall the
  recorded walls project for two workers (each ``xdist_group`` on one worker, longest first),
  with how long one worker waited idle at the end;
- the list (``tests/engine_budget.py``): any start it does not allow.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the budget list lives in tests/

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))  # its sibling, when imported as bench.budget

import suite_figures  # noqa: E402

from tests import engine_budget  # noqa: E402

DEFAULT_PYTEST = suite_figures.DEFAULT_PYTEST
#: how a start's engine ended: stopped at its run's end, a death, cut with its run (Ctrl-C,
#: pytest-timeout), killed with it (no stop recorded), ? (a ledger that records no stops)
ENDINGS = ("stopped", "death", "cut", "killed", "?")
#: what each process of a start imports: the harness's own (offline), the engine core, a worker,
#: the API server (a server's own process)
IMPORTS = {
    "llm": "from vllm import LLM",
    "engine_core": "import vllm.v1.engine.core",
    "worker": "import vllm.v1.worker.cpu_worker",
    "api_server": "import vllm.entrypoints.openai.api_server",
}


# --- reading a run ------------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


def bare(nodeid: str) -> str:
    """A node id without xdist's ``@group`` suffix."""
    return nodeid.split("@")[0]


@dataclass
class Start:
    kind: str
    label: str
    start_s: float
    restart: bool
    pid: int
    test: str  # the outer test that started it (the ledger's tag)
    import_s: float | None
    ended: str = "?"  # stopped / death / cut / killed / ? (a ledger without stops)
    repeated: bool = False  # another run (process) of the suite started the same configuration

    @property
    def why(self) -> str:
        return "restart after a death" if self.restart else "configuration"

    @property
    def ranks(self) -> int:
        head = self.label.split(", ")[:2]
        return next((int(p[2:]) for p in head if p[:2] in ("tp", "pp") and p[2:].isdigit()), 1)


def starts_of(ledger: list[dict[str, Any]]) -> list[Start]:
    """The ledger's starts, each with how it ended (matched to its stop by process and label)."""
    starts: list[Start] = []
    has_stops = any(e.get("event") == "stop" for e in ledger)
    open_: dict[tuple[int, str], list[Start]] = {}
    seen: dict[str, set[int]] = {}
    for e in ledger:
        key = (int(e.get("pid", 0)), str(e.get("label", "")))
        if e.get("event", "start") == "start":
            s = Start(str(e["kind"]), str(e["label"]), float(e["start_s"]), bool(e.get("restart")),
                      key[0], bare(str(e.get("tag") or e.get("test") or "?")),
                      None if e.get("import_s") is None else float(e["import_s"]),
                      ended="killed" if has_stops else "?")
            others = seen.setdefault(s.label, set())
            s.repeated = bool(others - {s.pid})
            others.add(s.pid)
            starts.append(s)
            open_.setdefault(key, []).append(s)
        elif open_.get(key):
            s = open_[key].pop(0)
            s.ended = "death" if e.get("died") else "cut" if e.get("cut") else "stopped"
    return starts


@dataclass
class TestRun:
    nodeid: str
    worker: str = "?"
    wall_s: float = 0.0
    begin: float | None = None
    end: float | None = None
    outcome: str = "passed"
    starts: list[Start] = field(default_factory=list)

    @property
    def group(self) -> str:
        """What xdist's loadgroup keeps on one worker: the ``@group``, else the test itself."""
        return self.nodeid.split("@", 1)[1] if "@" in self.nodeid else self.nodeid


def tests_of(timeline: list[dict[str, Any]], durations: dict[str, float] | None = None) -> dict[str, TestRun]:
    """Per test (by bare node id): wall (setup + call + teardown), worker, outcome."""
    runs: dict[str, TestRun] = {}
    for e in timeline:
        if e.get("event") != "phase":
            continue
        t = runs.setdefault(bare(e["nodeid"]), TestRun(e["nodeid"]))
        t.worker = str(e.get("worker", "?"))
        t.wall_s += float(e.get("duration") or 0.0)
        if e.get("start") is not None:
            t.begin = min(t.begin or e["start"], e["start"])
            t.end = max(t.end or e["stop"], e["stop"])
        if e["when"] == "call" or e["outcome"] != "passed":
            t.outcome = e["outcome"] if t.outcome == "passed" else t.outcome
    for nodeid, seconds in (durations or {}).items():
        runs.setdefault(bare(nodeid), TestRun(nodeid, wall_s=seconds))
    return runs


def project(walls: Sequence[tuple[str, float]], workers: int = 2) -> tuple[float, float]:
    """The wall of ``walls`` (group, seconds) on ``workers``: each group on one worker, the longest
    group first to whichever worker is free first.  Returns (wall, the idle time at the end)."""
    groups: dict[str, float] = {}
    for group, seconds in walls:
        groups[group] = groups.get(group, 0.0) + seconds
    loads = [0.0] * workers
    for seconds in sorted(groups.values(), reverse=True):
        loads[loads.index(min(loads))] += seconds
    return max(loads), max(loads) - min(loads)


# --- the breakdown ------------------------------------------------------------------------------


def breakdown(run_dir: Path, imports: dict[str, float] | None = None) -> dict[str, Any]:
    """A run's breakdown (the module's doc says what it holds), as ``--json`` writes it."""
    ledger = read_jsonl(run_dir / "ledger.jsonl")
    timeline = read_jsonl(run_dir / "timeline.jsonl")
    tests = tests_of(timeline)
    starts = starts_of(ledger)
    for s in starts:
        tests.setdefault(s.test, TestRun(s.test)).starts.append(s)
    return {
        "run": str(run_dir),
        "tests": [
            {"test": t.nodeid, "worker": t.worker, "wall_s": round(t.wall_s, 1), "outcome": t.outcome,
             "starts": [asdict(s) | {"why": s.why} for s in t.starts]}
            for t in sorted(tests.values(), key=lambda t: -t.wall_s)
        ],
        "totals": {"tests": len(tests), **start_totals(starts), **import_totals(starts, imports),
                   **wall_totals(list(tests.values()), timeline)},
        "imports": imports,
        "budget_problems": engine_budget.ledger_problems(ledger),
    }


def start_totals(starts: Sequence[Start]) -> dict[str, Any]:
    """The starts counted: first starts and restarts, how they ended, their seconds."""
    return {
        "starts": len(starts),
        "first_starts": sum(not s.restart for s in starts),
        "restarts": sum(s.restart for s in starts),
        "ended": {k: sum(s.ended == k for s in starts) for k in ENDINGS},
        "repeated_configurations": sum(s.repeated for s in starts),
        "start_s": round(sum(s.start_s for s in starts), 1),
        "start_median_s": round(statistics.median(s.start_s for s in starts), 1) if starts else None,
        "start_longest_s": round(max(s.start_s for s in starts), 1) if starts else None,
    }


def spawned_imports(starts: Sequence[Start], imports: dict[str, float]) -> tuple[float, float]:
    """(vLLM's import in the test's own process where an older ledger did not record it: one
    ``from vllm import LLM`` per process, at its first offline start; vLLM's imports in the
    processes the starts spawned), from the ``imports`` measured alone."""
    estimated = 0.0
    spawned = 0.0
    first: set[int] = set()
    for s in starts:
        spawned += imports["engine_core"] + s.ranks * imports["worker"]
        if s.kind == "server":
            spawned += imports["api_server"]
        elif s.import_s is None and s.pid not in first:
            estimated += imports["llm"]
        first.add(s.pid)
    return estimated, spawned


def import_totals(starts: Sequence[Start], imports: dict[str, float] | None) -> dict[str, Any]:
    """vLLM's import seconds: recorded in the test's process; estimated and spawned (from ``imports``,
    None without it)."""
    recorded = sum(s.import_s or 0.0 for s in starts)
    estimated, spawned = spawned_imports(starts, imports) if imports else (None, None)
    return {
        "import_in_test_process_s": round(recorded, 1),
        "import_in_test_process_estimated_s": _round1(estimated),
        "import_in_spawned_processes_s": _round1(spawned),
    }


def _round1(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def measured_wall(timeline: list[dict[str, Any]]) -> float | None:
    """The run's own clock, its finish less its start; None where the timeline lacks either."""
    marks = {e["event"]: float(e["t"]) for e in timeline if e.get("event") in ("start", "finish")}
    return marks["finish"] - marks["start"] if len(marks) == 2 else None


def measured_idle(tests: Sequence[TestRun]) -> float | None:
    """How long the first worker to finish waited for the last; None under two known workers."""
    by_worker: dict[str, float] = {}
    for t in tests:
        by_worker[t.worker] = max(by_worker.get(t.worker, 0.0), t.end or 0.0)
    ends = sorted(v for k, v in by_worker.items() if k != "?" and v)
    return round(ends[-1] - ends[0], 1) if len(ends) >= 2 else None


def wall_totals(tests: Sequence[TestRun], timeline: list[dict[str, Any]]) -> dict[str, Any]:
    """The tests' seconds, and the wall: measured, and projected for two workers."""
    projected, idle = project([(t.group, t.wall_s) for t in tests])
    return {
        "tests_s": round(sum(t.wall_s for t in tests), 1),
        "wall_measured_s": _round1(measured_wall(timeline)),
        "wall_projected_s": round(projected, 1),
        "idle_at_end_measured_s": measured_idle(tests),
        "idle_at_end_projected_s": round(idle, 1),
    }


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def render(data: dict[str, Any], width: int = 100) -> list[str]:
    """The breakdown as text: a line per test (and per start), then the totals."""
    out = [f"{'wall':>7}  {'worker':6}  {'starts':>6}  {'start s':>7}  test"]
    for t in data["tests"]:
        out += test_lines(t, width)
    tot = data["totals"]
    out.append("")
    out.append(starts_line(tot))
    out += import_lines(tot, data["imports"])
    out.append(wall_line(tot))
    out.append(f"budget (tests/engine_budget.py): {len(engine_budget.BUDGET)} entries, "
               f"{sum(e.starts for e in engine_budget.BUDGET)} of {engine_budget.MAX_STARTS} starts")
    out += [f"  over budget: {p}" for p in data["budget_problems"]]
    return out


def test_lines(t: dict[str, Any], width: int) -> list[str]:
    """One test's line (wall, worker, starts, their seconds), then a line per start."""
    secs = sum(s["start_s"] for s in t["starts"])
    name = t["test"].removeprefix("tests/")
    status = "" if t["outcome"] == "passed" else f"  ({t['outcome']})"
    out = [f"{t['wall_s']:7.1f}  {t['worker']:6}  {len(t['starts']):6d}  {secs:7.1f}  {name[:width]}{status}"]
    return out + [start_line(s) for s in t["starts"]]


def start_line(s: dict[str, Any]) -> str:
    """One start: its seconds, what and why, how it ended, its import (from half a second)."""
    imp = "" if s["import_s"] is None or s["import_s"] < 0.5 else f", import {s['import_s']:.1f} s"
    again = ", configuration started by another run too" if s["repeated"] else ""
    return (f"{'':33}{s['start_s']:6.1f} s  {s['kind']} {s['label']}: {s['why']}, "
            f"ended: {s['ended']}{imp}{again}")


def starts_line(tot: dict[str, Any]) -> str:
    ended = ", ".join(f"{k} {v}" for k, v in tot["ended"].items() if v)
    return (f"engine starts: {tot['starts']} ({tot['first_starts']} first starts of a configuration in "
            f"their run, {tot['restarts']} restarts after a death) in {tot['start_s']:.0f} s; "
            f"ended: {ended}; {tot['repeated_configurations']} of a configuration another run started too")


def import_lines(tot: dict[str, Any], imports: dict[str, float] | None) -> list[str]:
    """Where vLLM's import went: the test's own process (estimated part said), the spawned
    processes and the rest of the starts (with ``imports``), each import measured alone."""
    own = tot["import_in_test_process_s"] + (tot["import_in_test_process_estimated_s"] or 0.0)
    imp = f"vLLM import in the test's own process: {own:.0f} s"
    if tot["import_in_test_process_estimated_s"]:
        imp += (f" ({tot['import_in_test_process_estimated_s']:.0f} s of it estimated: a ledger "
                "without import_s)")
    spawned = tot["import_in_spawned_processes_s"]
    if spawned is not None:
        rest = max(0.0, tot["start_s"] - own - spawned)
        imp += (f"; in the processes the starts spawned (engine core, workers, API servers): "
                f"~{spawned:.0f} s; the engines' own start: the rest, ~{rest:.0f} s")
    if not imports:
        return [imp]
    each = ", ".join(f"{k} {v:.1f} s" for k, v in imports.items())
    return [imp, f"  each import alone in a fresh interpreter (median): {each}"]


def wall_line(tot: dict[str, Any]) -> str:
    idle = tot["idle_at_end_measured_s"]
    half = minutes(tot["tests_s"] / 2)
    return (f"tests: {tot['tests']}, {tot['tests_s']:.0f} s of test time (÷ 2 = {half}); "
            f"wall measured {minutes(tot['wall_measured_s'])}, projected for 2 workers "
            f"{minutes(tot['wall_projected_s'])} (idle at the end: measured "
            f"{'?' if idle is None else f'{idle:.0f}'} s, "
            f"projected {tot['idle_at_end_projected_s']:.0f} s)")


def by_function(data: dict[str, Any]) -> dict[str, tuple[int, float, float]]:
    """file::test (parametrizations added up) -> (starts, their seconds, wall)."""
    out: dict[str, tuple[int, float, float]] = {}
    for t in data["tests"]:
        name = t["test"].split("[")[0].removeprefix("tests/engine/")
        starts, secs, wall = out.get(name, (0, 0.0, 0.0))
        secs += sum(s["start_s"] for s in t["starts"])
        out[name] = (starts + len(t["starts"]), secs, wall + t["wall_s"])
    return out


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """A markdown table: per engine test, its starts (their seconds) and wall, before and after."""
    b, a = by_function(before), by_function(after)
    names = sorted({n for n in (*b, *a) if not n.startswith("tests/unit/")},
                   key=lambda n: (-(b.get(n, (0, 0.0, 0.0))[0]), n))
    rows = ["| test | starts before | starts after | wall before | wall after |", "|---|---|---|---|---|"]

    def cell(v: tuple[int, float, float] | None, what: int) -> str:
        if v is None:
            return "—"
        return f"{v[0]} ({v[1]:.0f} s)" if what == 0 else f"{v[2]:.0f} s"

    for n in names:
        x, y = b.get(n), a.get(n)
        rows.append(f"| `{n}` | {cell(x, 0)} | {cell(y, 0)} | {cell(x, 2)} | {cell(y, 2)} |")
    tb, ta = (tuple(map(sum, zip(*(d[n] for n in names if n in d), strict=False))) or (0, 0.0, 0.0)
              for d in (b, a))
    rows.append(f"| **all** | **{tb[0]}** ({tb[1]:.0f} s) | **{ta[0]}** ({ta[1]:.0f} s) "
                f"| {tb[2]:.0f} s | {ta[2]:.0f} s |")
    return rows


# --- running ------------------------------------------------------------------------------------


@contextlib.contextmanager
def locked(path: str | None) -> Iterator[None]:
    if not path:
        yield
        return
    with open(path, "a") as f:
        print(f"budget: waiting for the lock {path}", file=sys.stderr)
        fcntl.flock(f, fcntl.LOCK_EX)
        print(f"budget: lock taken {time.strftime('%H:%M:%S')}", file=sys.stderr)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def offline_env() -> dict[str, str]:
    return {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}


def run(run_dir: Path, pytest_args: Sequence[str], lock: str | None) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    ledger = run_dir / "ledger.jsonl"
    ledger.write_text("")
    env = {**offline_env(), "ENGINEDEAD_START_LEDGER": str(ledger),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    cmd = [sys.executable, "-m", "pytest", "-p", "tests.support.timeline",
           f"--budget-timeline={run_dir / 'timeline.jsonl'}", *pytest_args]
    (run_dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    with locked(lock), open(run_dir / "pytest.log", "w") as log:
        # the machine and the commit as the run begins (after the lock's wait)
        (run_dir / "run.json").write_text(json.dumps(suite_figures.run_facts(ROOT), indent=1) + "\n")
        t0 = time.monotonic()
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
        took = minutes(time.monotonic() - t0)
        print(f"budget: pytest exited {done.returncode} after {took}; log {run_dir / 'pytest.log'}",
              file=sys.stderr)
    code = done.returncode
    return code


def measure_imports(out: Path, lock: str | None, repeat: int = 3) -> dict[str, float]:
    """Each process's vLLM import, alone in a fresh interpreter, the median of ``repeat``."""
    found: dict[str, float] = {}
    with locked(lock):
        for name, statement in IMPORTS.items():
            code = f"import time; t = time.monotonic(); {statement}; print(time.monotonic() - t)"
            times = []
            for _ in range(repeat):
                done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      env=offline_env(), check=True)
                times.append(float(done.stdout.strip().splitlines()[-1]))
            found[name] = round(statistics.median(times), 2)
    out.write_text(json.dumps(found, indent=1) + "\n")
    return found


def _breakdown(run_dir: Path) -> dict[str, Any]:
    """The breakdown of the run to record; a ledger or timeline it cannot read is a ``RunError``."""
    try:
        return breakdown(run_dir)
    except (KeyError, TypeError, ValueError) as e:
        raise suite_figures.RunError(f"its ledger or timeline is not what `bench/budget.py run` writes "
                                     f"({e!r})") from None


def record(run_dir: Path, results: Path, data: dict[str, Any] | None = None) -> int:
    """Record the finished run in ``run_dir`` (its breakdown ``data``, made here if None) into
    ``results``; 0, or 2 with one line that says why it cannot be recorded."""
    try:
        totals = (data or _breakdown(run_dir))["totals"]
        run = suite_figures.read_run(run_dir, totals)
        suite_figures.record(results, run)
    except (suite_figures.RunError, OSError) as e:
        print(f"budget: {run_dir} not recorded: {e}", file=sys.stderr)
        return 2
    print(f"budget: recorded into {results} as the run on {run.kind}: {run.outcomes.words()}, "
          f"wall {suite_figures.minutes(run.wall.measured_s)}, commit {run.commit}", file=sys.stderr)
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench/budget.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the suite with its start ledger and timeline, then the breakdown")
    r.add_argument("dir", type=Path)
    r.add_argument("--lock", default=None)
    r.add_argument("--imports", type=Path, default=None, help="a file `imports` wrote")
    r.add_argument("--record", action="store_true", help="record the finished run into --results")
    p = sub.add_parser("report", help="the breakdown of a run in DIR")
    p.add_argument("dir", type=Path)
    p.add_argument("--imports", type=Path, default=None, help="a file `imports` wrote")
    p.add_argument("--json", type=Path, default=None)
    w = sub.add_parser("record", help="record the finished run in DIR into --results")
    w.add_argument("dir", type=Path)
    for each in (r, w):
        each.add_argument("--results", type=Path, default=suite_figures.RESULTS,
                          help="the results file (default: bench/suite-results.json)")
    c = sub.add_parser("compare", help="a markdown table of two breakdowns (breakdown.json), test by test")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    i = sub.add_parser("imports", help="time vLLM's imports in fresh interpreters")
    i.add_argument("out", type=Path)
    i.add_argument("--lock", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1:]
    args = parser().parse_args(argv)
    if args.command == "compare":
        before, after = (json.loads(Path(p).read_text()) for p in (args.before, args.after))
        print("\n".join(compare(before, after)))
        return 0
    if args.command == "imports":
        print(json.dumps(measure_imports(args.out, args.lock)))
        return 0
    if args.command == "record":
        return record(args.dir, args.results)
    code = 0
    if args.command == "run":
        code = run(args.dir, pytest_args or DEFAULT_PYTEST, args.lock)
    imports = json.loads(args.imports.read_text()) if args.imports else None
    data = breakdown(args.dir, imports)
    (getattr(args, "json", None) or args.dir / "breakdown.json").write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(render(data)))
    if getattr(args, "record", False):
        code = record(args.dir, args.results, data) or code
    return code or (1 if data["budget_problems"] else 0)


if __name__ == "__main__":
    sys.exit(main())
