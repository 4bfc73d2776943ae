"""A downstream repo for the tests: its suite, run as ``pytest -p enginedead``, and what it left.

``Downstream`` is a ``pytester`` directory holding suites copied from ``tests/examples/``.
``Downstream.run`` is the one way the tests run a downstream pytest: in-process or in a
subprocess, returning the outcomes and, when asked, the JSON report (validated against
``report.schema.json`` when jsonschema is installed).  ``Downstream.start`` runs it in a
session of its own, to be cut short (Ctrl-C, SIGKILL) while it watches the run's
process tree.  ``assert_nothing_left`` is the one check that a run's engine processes
and their ``/dev/shm`` entries are gone while a bystander ``VLLM::Worker`` lives on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from pytest_enginedead.harness.engines.cleanup import mapped_shm
from pytest_enginedead.logic.reporting.report import SCHEMA_PATH
from pytest_enginedead.process.pinned import ProcRef

HERE = Path(__file__).resolve().parent
#: the downstream suites (``pytester_example_dir``): ``tests/examples``
EXAMPLES = HERE.parent / "examples"
#: real worker processes for the no-vLLM tests; self-contained, copied beside a suite
PROCS = HERE / "procs.py"
REPORT_NAME = "enginedead-report.json"
#: the title vLLM gives its worker processes
WORKER_TITLE = "VLLM::Worker"


def default_sigint() -> None:
    """Ctrl-C's default action for a run to be cut short, whatever this process inherited
    (``Background``'s ``preexec_fn``: in the child, before it execs): a shell that starts a
    command in the background without job control makes it ignore SIGINT (POSIX), an ignored
    SIGINT stays ignored across every exec below it, and Python keeps it so."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Outcome:
    """What one downstream run ended with: pytest's result and the JSON report."""

    result: pytest.RunResult
    report: dict[str, Any] | None = None

    @property
    def ret(self) -> int | pytest.ExitCode:
        return self.result.ret

    @property
    def stdout(self) -> pytest.LineMatcher:
        return self.result.stdout

    @property
    def stderr(self) -> pytest.LineMatcher:
        return self.result.stderr

    @property
    def text(self) -> str:
        return self.result.stdout.str() + "\n" + self.result.stderr.str()

    @property
    def outcomes(self) -> dict[str, int]:
        """``{"passed": 2, "failed": 1}``, from pytest's last line."""
        return self.result.parseoutcomes()

    def assert_outcomes(self, **counts: int) -> None:
        __tracebackhide__ = True
        self.result.assert_outcomes(**counts)


def pytest_args(plugins: Sequence[str], args: Sequence[str]) -> list[str]:
    """The command line a downstream repo uses: only the plugins it names."""
    return ["-p", "enginedead", *(a for p in plugins for a in ("-p", p)), *args]


def validated(data: dict[str, Any]) -> dict[str, Any]:
    """The report, checked against the published schema when jsonschema is installed."""
    try:
        import jsonschema
    except ImportError:
        return data
    jsonschema.validate(data, json.loads(Path(SCHEMA_PATH).read_text()))
    return data


#: an xdist suite under two workers: test_xdist.py's run, and the unsharded run test_shards.py
#: compares its shards with (one run: ``Downstream.shared_run``)
TWO_WORKERS = ("-n", "2", "--dist", "loadgroup")
TWO_WORKERS_PLUGINS = ("timeout", "xdist")
#: the runs more than one test reads (``Downstream.shared_run``): (suite files, args, plugins) -> outcome
_SHARED: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], Outcome] = {}


class Downstream:
    """A downstream repo in a ``pytester`` directory (see the ``downstream`` fixture)."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.path = pytester.path
        self._started: list[Background] = []

    def copy(self, *examples: str) -> Downstream:
        """Copy suites (a directory's files, or one file) from ``examples/`` into the repo."""
        for name in examples:
            self.pytester.copy_example(name)
        return self

    def copy_procs(self) -> Downstream:
        """``procs.py`` beside the suite, for suites that drive real worker processes."""
        shutil.copy(PROCS, self.path / PROCS.name)
        return self

    def run(
        self,
        *args: str,
        plugins: Sequence[str] = (),
        in_subprocess: bool = False,
        report: bool = False,
        timeout: float = 600,
    ) -> Outcome:
        """``pytest -p enginedead [-p PLUGIN...] ARGS`` in the repo; the report if ``report``.

        In-process by default (fast; shares this process's modules and environment);
        ``in_subprocess=True`` for runs that start engines or xdist workers.
        """
        cli = list(args)
        path = self.path / REPORT_NAME
        if report:
            path.unlink(missing_ok=True)
            cli.append(f"--enginedead-report={path}")
        argv = pytest_args(plugins, cli)
        if in_subprocess:
            result = self.pytester.runpytest_subprocess(*argv, timeout=timeout)
        else:
            result = self.pytester.runpytest(*argv)
        outcome = Outcome(result)
        if report:
            if not path.exists():
                pytest.fail(f"the downstream run wrote no report:\n{outcome.text[-4000:]}")
            outcome.report = validated(json.loads(path.read_text()))
        return outcome

    def shared_run(self, *args: str, plugins: Sequence[str] = (), timeout: float = 600) -> Outcome:
        """``run(*args, in_subprocess=True, report=True)`` of the suite copied here, once per
        process for the same suite and arguments: tests that read the same run share its
        engines (give them one ``xdist_group``, so that one worker runs them)."""
        suite = tuple(sorted(p.name for p in self.path.glob("test_*.py")))
        key = (suite, tuple(args), tuple(plugins))
        if key not in _SHARED:
            _SHARED[key] = self.run(*args, plugins=plugins, in_subprocess=True, report=True, timeout=timeout)
        return _SHARED[key]

    def start(
        self, *args: str, plugins: Sequence[str] = (), env: dict[str, str] | None = None
    ) -> Background:
        """The same run in a subprocess and a session of its own, to be cut short.

        ``env``: variables to set for the run on top of this process's environment.
        """
        argv = [sys.executable, "-m", "pytest", *pytest_args(plugins, args)]
        run = Background(self.path, argv, {**os.environ, **(env or {})})
        self._started.append(run)
        return run

    def close(self) -> None:
        """Test hygiene: whatever a cut-short run left (if its test failed), by pid."""
        for run in self._started:
            run.kill_everything()


class Background:
    """A downstream pytest in its own session, Ctrl-C's default action restored (a suite run as
    ``cmd &`` from a script still delivers the Ctrl-C it sends); records its process tree."""

    def __init__(self, path: Path, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.path = path
        self.log_path = path / "pytest.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - the run's output, for its whole life
        self.proc = subprocess.Popen(
            argv, cwd=path, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, env=env, preexec_fn=default_sigint,
        )
        #: every process seen below the run (or below ``under``), pinned by creation time
        self.seen: set[ProcRef] = set()
        #: the ``/dev/shm`` entries those processes had mapped
        self.shm: set[str] = set()
        #: each seen process's command line when it was first seen (it may be gone since)
        self.titles: dict[ProcRef, str] = {}

    def record(self, under: int | None = None) -> None:
        """Add the processes now below ``under`` (default: the run's pytest) and their shm."""
        try:
            kids = psutil.Process(under or self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for kid in kids:
            with contextlib.suppress(psutil.Error):
                ref = ProcRef.of(kid)
                self.seen.add(ref)
                name = " ".join(kid.cmdline())
                if name:  # the latest: a spawned process takes its title after a moment
                    self.titles[ref] = name
        self.shm |= mapped_shm(self.seen)

    def watch(
        self,
        extra_s: float,
        marker: str = "generating",
        under: Callable[[], int | None] | None = None,
        limit_s: float = 240,
    ) -> None:
        """Record the process tree until the suite wrote ``marker`` and ``extra_s`` passed.

        ``under``: record below that pid (read once the marker exists) instead of the run.
        A ``VLLM::Worker`` must have been seen by then.
        """
        flag = self.path / marker
        deadline = time.monotonic() + limit_s
        began: float | None = None
        while time.monotonic() < deadline:
            if began is None and flag.exists():
                began = time.monotonic()
            if under is None:
                self.record()
            elif began is not None and (pid := under()) is not None:
                self.record(pid)
            if began is not None and time.monotonic() - began >= extra_s:
                assert self.seen_titled(WORKER_TITLE), sorted(self.titles.values())
                return
            if self.proc.poll() is not None:
                pytest.fail(f"the downstream run ended early:\n{self.output()}")
            time.sleep(0.2)
        pytest.fail(f"the downstream test never wrote {marker!r}:\n{self.output()}")

    def wait_for(self, what: str, found: Callable[[], bool], limit_s: float = 240) -> None:
        """Record the process tree (every 20 ms) until ``found()``; fail if the run ends first."""
        deadline = time.monotonic() + limit_s
        while not found():
            self.record()
            if self.proc.poll() is not None:
                pytest.fail(f"the downstream run ended before {what}:\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within {limit_s:.0f} s:\n{self.output()}")
            time.sleep(0.02)
        self.record()

    def seen_titled(self, part: str) -> bool:
        """Whether a process whose command line holds ``part`` was seen below the run."""
        return any(part in t for t in self.titles.values())

    def wait(self, timeout: float = 120) -> int:
        """The run's exit status; the process tree is recorded while it winds down."""
        deadline = time.monotonic() + timeout
        try:
            while self.proc.poll() is None:
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(self.proc.args, timeout)
                self.record()
                time.sleep(0.05)
            return self.proc.returncode
        finally:
            self._log.close()

    def sessions(self) -> set[int]:
        """The run's session and the sessions of what it started (an API server has its own)."""
        sids = {self.proc.pid}
        for ref in self.seen:
            with contextlib.suppress(OSError):
                sids.add(os.getsid(ref.pid))
        return sids

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def kill_everything(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()
        for ref in self.seen:
            proc = ref.process(zombie=True)
            if proc is not None:
                with contextlib.suppress(psutil.Error):
                    proc.kill()


#: the commands that write a log (default: a file in the temp dir, which a test would leave)
LOGGING_COMMANDS = ("check", "calibrate")


def enginedead(*args: str, timeout: float = 30, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The ``enginedead`` command (``python -m pytest_enginedead.command ARGS``).

    With ``cwd``, a check's or calibrate's log goes there unless the test gives ``--log``.
    """
    if cwd is not None and args and args[0] in LOGGING_COMMANDS and "--log" not in args:
        args = (*args, "--log", str(cwd / f"enginedead-{args[0]}.log"))
    return subprocess.run(
        [sys.executable, "-m", "pytest_enginedead.command", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False,
    )


def left_in_sessions(sessions: Iterable[int], spare: Iterable[int] = ()) -> list[str]:
    """Live processes in these sessions (pid and command line), but ``spare``'s pids.

    By session, not by name: whatever the run started, an orphan whose parent was
    killed first included, stays in the session it was started in.
    """
    sids, keep, me = set(sessions), set(spare), os.getpid()
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if proc.pid in keep or proc.pid == me or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getsid(proc.pid) in sids:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])}")
    return found


def left_in_temp(directory: Path) -> list[str]:
    """What engines and the harness left in a run's temp dir: run directories
    (``enginedead-*``), vLLM's rendezvous files (``vllm_dist_*``) and ipc sockets."""
    return sorted(
        p.name for p in directory.iterdir()
        if p.name.startswith(("enginedead-", "vllm_dist_")) or p.is_socket()
    )


def title(ref: ProcRef) -> str:
    """A process's command line as ``ps`` shows it (vLLM sets it to its title), or ''."""
    proc = ref.process()
    try:
        return " ".join(proc.cmdline()) if proc is not None else ""
    except psutil.Error:
        return ""


def engine_processes(report: dict[str, Any]) -> tuple[set[ProcRef], set[str]]:
    """Every engine process a run's report names, and the shm entries it recorded."""
    assert report["engines"], "the run started no engine"
    procs: set[ProcRef] = set()
    shm: set[str] = set()
    for engine in report["engines"]:
        assert engine["pids"], engine
        procs |= {ProcRef(ref["pid"], ref["create_time"]) for ref in engine["pids"]}
        shm |= set(engine["shm"])
    return procs, shm


def assert_nothing_left(
    procs: Iterable[ProcRef],
    shm: Iterable[str],
    bystander: psutil.Process,
    *,
    within_s: float = 0.0,
    require_shm: bool = False,
    context: str = "",
) -> None:
    """Nothing left behind: each process gone (or a zombie), each shm entry removed, and
    the bystander ``VLLM::Worker`` nobody asked us to stop still alive.

    ``within_s``: how long the cleanup may take (a reaper at work).
    ``require_shm``: the processes must have mapped shared memory, or the check is empty.
    """
    __tracebackhide__ = True
    procs, shm = set(procs), set(shm)
    assert procs, "no process was recorded: the check would be empty"
    if require_shm:
        assert shm, "the processes mapped no shared memory: the check would be empty"

    def left() -> tuple[list[ProcRef], list[str]]:
        return [r for r in procs if r.process() is not None], sorted(p for p in shm if os.path.exists(p))

    deadline = time.monotonic() + within_s
    alive, leaked = left()
    while (alive or leaked) and time.monotonic() < deadline:
        time.sleep(0.25)
        alive, leaked = left()
    assert not alive, f"left behind: {[(r.pid, title(r)) for r in alive]}\n{context}"
    assert not leaked, f"leaked /dev/shm entries: {leaked}\n{context}"
    assert bystander.is_running() and bystander.status() != psutil.STATUS_ZOMBIE, "the bystander was stopped"
