"""pytest-xdist: a CPU budget per worker, one worker per engine config, one report.

Grouping: with ``--dist loadgroup`` every test that shares an engine configuration
goes to the same worker.  xdist's own loadgroup reads groups from node ids it
rewrites, which pytest 9.2's structured ids no longer allow (pytest-xdist#1386),
so the plugin brings its scheduler: each worker writes ``{nodeid: group}`` to its
own file, the controller's scheduler reads them.  User ``xdist_group`` marks count
too.  Workers send what their engines found through ``workeroutput``; the
controller merges it, so the terminal summary and the JSON report are one table,
one file.

Bad input: the controller validates.  The controller collects nothing, so each
worker writes beside its groups how many engine tests it planned; when the first
worker's collection reaches the controller (``pytest_xdist_node_collection_finished``,
before any test is scheduled) the controller checks the model once, with the same
code and the same one line as a run without ``-n``.  A worker whose session still
ends in a usage error or ``pytest.exit`` (another plugin's, say) has the controller
end the same way (``pytest_testnodedown``), instead of xdist's ``assert not
crashitem``; a worker process that dies is that test's failure with its last words
(its exit status and what ``faulthandler`` wrote) added (``pytest_handlecrashitem``).
"""

from __future__ import annotations

import contextlib
import faulthandler
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Generator
from typing import IO, Any

import pytest

from ..logic.planning.engines import EngineSpec
from ..logic.reporting.report import Results
from .workerplan import EngineUses, WorkerEnded, WorkerPlan

WIRE_KEY = "enginedead"

GROUPS_KEY = "enginedead_groups_dir"

#: workerinput: the controller checks the model when the worker publishes its plan
CHECKS_KEY = "enginedead_controller_checks"

#: workeroutput: how a worker's session ended, when a usage error or ``pytest.exit`` ended it
ENDED_KEY = "enginedead_ended"

#: a worker's faulthandler file (in the groups directory): what it said as it died
LAST_WORDS = "{worker}.last-words"

#: how many lines of a dead worker's last words its failure shows
LAST_WORDS_LINES = 16


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def worker_index(config: pytest.Config) -> tuple[int, int] | None:
    """(index, count) of this xdist worker, or None outside xdist."""
    info = getattr(config, "workerinput", None)
    if not info:
        return None
    worker_id = str(info.get("workerid", "gw0"))
    count = int(info.get("workercount", 1) or 1)
    try:
        return int(worker_id.removeprefix("gw")), count
    except ValueError:
        return 0, count


def _allowed() -> list[int]:
    return (sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else list(range(os.cpu_count() or 1)))


def core_budget(config: pytest.Config) -> tuple[list[int], str]:
    """(the cores an engine of this run may use, who owns them, for messages).

    On an xdist worker, its share (``cpu_bind``); on xdist's controller, the smallest share
    a worker will get; outside xdist, every core this process may use.
    """
    if is_worker(config):
        bound = cpu_bind(config) or ""
        return [int(c) for c in bound.split(",") if c.isdigit()], "this xdist worker"
    workers = len(config.getoption("tx", None) or []) if config.pluginmanager.hasplugin("xdist") else 0
    cpus = _allowed()
    if workers > 1:
        return cpus[: max(1, len(cpus) // workers)], f"each of the {workers} xdist workers"
    return cpus, "this run"


def cpu_bind(config: pytest.Config, cpus: list[int] | None = None) -> str | None:
    """The cores this worker's engines may use: the allowed CPUs split between workers.

    ``VLLM_CPU_OMP_THREADS_BIND`` syntax (``"0"``, ``"2,3"``).  Outside xdist, None:
    vLLM decides.  With more workers than cores, workers share round-robin.
    """
    where = worker_index(config)
    if where is None:
        return None
    index, count = where
    if cpus is None:
        cpus = _allowed()
    if count >= len(cpus):
        return str(cpus[index % len(cpus)])
    per = len(cpus) // count
    return ",".join(str(c) for c in cpus[index * per : (index + 1) * per])


def group_name(spec: EngineSpec) -> str:
    """One xdist group per engine configuration (stable across workers)."""
    digest = hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
    return f"enginedead-bs{spec.max_num_seqs}-{digest}"


def item_group(item: pytest.Item, spec: EngineSpec | None) -> str | None:
    """The scheduling group of a test: its engine config, joined with any xdist_group."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")}
    if spec is not None:
        names.add(group_name(spec))
    return "_".join(sorted(names)) or None


def _shared_dir(config: pytest.Config) -> str | None:
    """On a worker: the controller's directory for this run, when this machine can reach it."""
    info = getattr(config, "workerinput", None) or {}
    directory = info.get(GROUPS_KEY)
    return directory if directory and os.path.isdir(directory) else None


def publish_plan(config: pytest.Config, plan: WorkerPlan) -> bool:
    """On a worker: write its plan where the controller reads it; return whether the controller
    checks the model (it then does, once, when this worker's collection reaches it)."""
    info = getattr(config, "workerinput", None) or {}
    directory = _shared_dir(config)
    if directory is None:
        return False
    path = os.path.join(directory, f"{info.get('workerid', 'gw')}.json")
    try:
        with open(path + ".tmp", "w") as f:
            f.write(plan.to_json())
        os.replace(path + ".tmp", path)  # one file per worker: no two writers
    except OSError:
        return False  # the worker checks for itself
    return bool(info.get(CHECKS_KEY))


def _published(directory: str, worker: str) -> WorkerPlan:
    """A worker's plan, or an empty one while it wrote none (or none this controller can read)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError), \
            open(os.path.join(directory, f"{worker}.json")) as f:
        return WorkerPlan.from_json(f.read())
    return WorkerPlan()


def make_scheduler(config: pytest.Config, log: Any, directory: str) -> Any:
    from xdist.scheduler.loadscope import LoadScopeScheduling

    class EngineGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """loadscope where the scope is the test's group (or the test itself)."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                merged: dict[str, str] = {}
                for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
                    with open(path) as f:
                        merged.update(WorkerPlan.from_json(f.read()).groups)
                self._groups = merged
            group = self._groups.get(nodeid)
            if group:
                return group
            at, bracket = nodeid.rfind("@"), nodeid.rfind("]")
            return nodeid[at + 1 :] if at > bracket else nodeid  # xdist's own suffix, older pytest

    return EngineGroupScheduling(config, log)


def dist_note(config: pytest.Config) -> str | None:
    """Say so when xdist runs without --dist loadgroup (engines would start per worker)."""
    if not config.pluginmanager.hasplugin("xdist") or is_worker(config):
        return None
    numprocesses = getattr(config.option, "numprocesses", None)
    dist = getattr(config.option, "dist", "no")
    if numprocesses and dist not in ("loadgroup", "no"):
        return (
            f"--dist {dist}: tests that share an engine may land on different workers, "
            "each starting its own; use --dist loadgroup"
        )
    return None


def send(config: pytest.Config, wire: str) -> None:
    config.workeroutput[WIRE_KEY] = wire  # type: ignore[attr-defined]


class WorkerHooks:
    """On an xdist worker: say how its session ended, and keep its last words where the
    controller reads them if its process dies."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._last_words: IO[str] | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """After pytest's own faulthandler plugin pointed it at stderr: point it at the file."""
        directory = _shared_dir(self.config)
        if directory is not None:
            worker = str(self.config.workerinput.get("workerid", "gw"))  # type: ignore[attr-defined]
            with contextlib.suppress(OSError):
                self._last_words = open(os.path.join(directory, LAST_WORDS.format(worker=worker)), "w")  # noqa: SIM115
                faulthandler.enable(file=self._last_words, all_threads=True)

    def _ended(self, exc: BaseException) -> None:
        output = self.config.workeroutput  # type: ignore[attr-defined]
        if isinstance(exc, pytest.UsageError):
            output[ENDED_KEY] = WorkerEnded(usage=tuple(str(a) for a in exc.args)).to_wire()
        elif isinstance(exc, pytest.exit.Exception):
            output[ENDED_KEY] = WorkerEnded(exit_message=exc.msg, returncode=exc.returncode).to_wire()

    def _watched(self) -> Generator[None, object, object]:
        """The body of a hook wrapper that notes a usage error or ``pytest.exit`` passing through."""
        try:
            return (yield)
        except (pytest.UsageError, pytest.exit.Exception) as exc:
            self._ended(exc)
            raise

    @pytest.hookimpl(wrapper=True)
    def pytest_collection(self, session: pytest.Session) -> Generator[None, object, object]:
        return (yield from self._watched())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        return (yield from self._watched())

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._last_words is not None:
            faulthandler.disable()  # pytest's own faulthandler plugin restores what it had
            self._last_words.close()


def exit_status_words(returncode: int | None) -> str:
    """How a process ended, as a person reads it: ``exit status 3``, ``killed by SIGKILL``."""
    if returncode is None:
        return "ended (its exit status is unknown)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        crash = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")
        hint = (" (the kernel's OOM killer, or a kill -9)" if name == "SIGKILL"
                else " (a crash)" if name in crash else "")
        return f"was killed by {name}{hint}"
    return f"exited with status {returncode}"


def last_words(directory: str | None, node: Any) -> str:
    """What a dead worker said: how its process ended, and the head of its faulthandler dump."""
    worker = str(getattr(getattr(node, "gateway", None), "id", "?"))
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    returncode = None
    if isinstance(popen, subprocess.Popen):
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            returncode = popen.wait(timeout=2)
    lines = [f"enginedead: the xdist worker {worker} process {exit_status_words(returncode)}"]
    said: list[str] = []
    if directory:
        path = os.path.join(directory, LAST_WORDS.format(worker=worker))
        with contextlib.suppress(OSError), open(path, errors="replace") as f:
            said = [ln.rstrip() for ln in f.read().splitlines() if ln.strip()]
    if said:
        shown = _current_thread_first(said)[:LAST_WORDS_LINES]
        lines.append("its last words (faulthandler, the crashing thread first):")
        lines += [f"    {ln}" for ln in shown]
        if len(said) > len(shown):
            lines.append(f"    ... ({len(said) - len(shown)} more lines)")
    else:
        lines.append("it left no last words (no Python fatal error: an exit from native code, "
                     "os._exit, or a signal Python cannot catch)")
    return "\n".join(lines)


def _current_thread_first(said: list[str]) -> list[str]:
    """A faulthandler dump with the thread that crashed ("Current thread") before the others."""
    start = next((i for i, ln in enumerate(said) if ln.startswith("Current thread")), None)
    if start is None:
        return said
    end = next((i for i in range(start + 1, len(said)) if said[i].startswith("Thread ")), len(said))
    head = next((i for i, ln in enumerate(said) if ln.startswith(("Thread ", "Current thread"))), start)
    return said[:head] + said[start:end] + said[head:start] + said[end:]


class ControllerHooks:
    """xdist hooks, registered only where xdist is loaded (they are xdist's hookspecs).

    ``check``: the model checks a run without ``-n`` makes before its first engine; the
    controller makes them once, as soon as a worker says it planned engine tests.
    """

    def __init__(self, results: Callable[[], Results], check: Callable[[EngineUses], None] | None = None,
                 say_header: Callable[[], None] | None = None) -> None:
        self.results = results  # the controller's (made on first use): workers' results merge into it
        self.groups_dir: str | None = None
        self.check = check
        self.checked = False
        #: prints the run's header, once, when a worker collected a test of the plugin's
        self.say_header = say_header

    def pytest_configure_node(self, node: Any) -> None:
        if self.groups_dir is None:
            self.groups_dir = tempfile.mkdtemp(prefix="enginedead-groups-")
        node.workerinput[GROUPS_KEY] = self.groups_dir
        node.workerinput[CHECKS_KEY] = self.check is not None

    @pytest.hookimpl(optionalhook=True)  # an xdist hook: optional for older xdist
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Before any test is scheduled: the header, said once, and the model, checked once, in the
        controller."""
        if self.groups_dir is None:
            return
        worker = str(getattr(getattr(node, "gateway", None), "id", "?"))
        published = _published(self.groups_dir, worker)
        if published.plugin_tests and self.say_header is not None:
            say, self.say_header = self.say_header, None
            say()
        if self.checked or self.check is None:
            return
        if published.engine_tests:
            self.checked = True
            self.check(published.uses)  # a UsageError ends the run as without -n

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadgroup" or self.groups_dir is None:
            return None
        return make_scheduler(config, log, self.groups_dir)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.groups_dir:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.groups_dir)

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        worker = str((getattr(node, "gateway", None) and node.gateway.id) or "?")
        self.results().absorb(output.get(WIRE_KEY), worker)
        ended = WorkerEnded.from_wire(output.get(ENDED_KEY))
        if ended is not None and ended.usage:  # the worker refused its input: the run does, in the same line
            raise pytest.UsageError(*ended.usage)
        if ended is not None and ended.exit_message is not None:
            pytest.exit(ended.exit_message, returncode=ended.returncode)

    @pytest.hookimpl(optionalhook=True)  # an xdist hook: optional for older xdist
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker process that died: its test's failure says how, with the worker's last words."""
        node = getattr(report, "node", None)
        report.longrepr = f"{report.longrepr}\n{last_words(self.groups_dir, node)}"
