"""A served engine kept up as systemd or Kubernetes keeps it: restarted when it exits.

``Supervisor`` starts the harness's own API server (``server.Server``: vLLM's
``python -m vllm.entrypoints.openai.api_server`` command line, the guard's environment as
an operator sets it, a run directory for the faults) and, each time the serving process
exits on its own, records the exit and starts a new one (``Restart=always``), while its
restart budget lasts: on the same port and with the same guard state directory
(``ENGINEDEAD_GUARD_STATE_DIR``, a scratch directory the supervisor owns for the run), as an
operator's supervisor restarts a unit, so that the next engine core carries the gone one's counters
and Prometheus sees one server whose counters never begin again at 0.  ``Monitor`` samples what runs
meanwhile: the engine core's and the workers' RSS, and what ``enginedead probe`` says of the server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from ...contract.names import EXIT_ENV, STATE_DIR_ENV
from ...logic import releases
from ...logic.planning.engines import DeadlineAndFaults, EngineSpec
from ...logic.soak.judge import Exit
from ...process import reading
from ...process.pinned import ProcRef
from ..engines.coreready import EngineStartError
from ..engines.reaper import Reaper
from ..engines.server import Server
from ..probing.probe import probe
from ..waiting import Progress, wait_until

#: how long a restart waits for the port of the server's first start to be free again
REBIND_S = 10.0


class SoakServer(Server):
    """The harness's API server with the exit status an operator's supervisor reads: a guarded
    server exits non-zero after its engine died (``ENGINEDEAD_EXIT_ON_DEATH=1``, as
    docs/how-to/probes.md deploys it); a stock one as vLLM does (status 0).  ``port`` (0: a free
    one) and ``state_dir`` (None: the run directory) are what its supervisor keeps across restarts."""

    def __init__(self, spec: EngineSpec, reaper: Reaper | None, port: int = 0,
                 state_dir: str | None = None) -> None:
        super().__init__(spec, reaper)
        self.fixed_port = port
        self.state_dir = state_dir

    def pick_port(self) -> int:
        if not self.fixed_port:
            return super().pick_port()
        if not wait_until(lambda: bindable(self.fixed_port), REBIND_S, every_s=0.25):
            raise EngineStartError(f"the server's port {self.fixed_port} could not be bound again for its "
                                   f"restart within {REBIND_S:g} s (something else listens on it)")
        return self.fixed_port

    def environment(self, first: DeadlineAndFaults) -> dict[str, str]:
        env = super().environment(first)
        if self.spec.guard is not None:
            env[EXIT_ENV] = "1"
        if self.state_dir is not None:
            env[STATE_DIR_ENV] = self.state_dir
        return env


def bindable(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` now (as uvicorn binds: ``SO_REUSEADDR``, so a
    gone server's connections in TIME_WAIT do not hold it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Incarnation:
    """One start of the server, from ready to exit."""

    number: int
    server: SoakServer
    ready_at: float
    exit: Exit | None = None
    #: (t, engine core RSS, workers' RSS summed), in bytes, sampled while no fatal fault was in force
    rss: list[tuple[float, int, int]] = field(default_factory=list)


class Supervisor:
    """Restart-on-exit for the soak's server; ``restarts`` None is no limit.  Each start after the first
    listens on the first one's port and shares its guard state directory (removed by ``close``)."""

    def __init__(self, spec: EngineSpec, first: DeadlineAndFaults, reaper: Reaper | None,
                 progress: Progress | None = None, restarts: int | None = None) -> None:
        self.spec = spec
        self.first = first
        self.reaper = reaper
        self.progress = progress
        self.restarts_left = restarts
        self.incarnations: list[Incarnation] = []
        self.exits: list[Exit] = []
        self.restarts = 0
        self.on_ready: list[Any] = []  # callbacks(base_url) after each start
        self.port = 0  # the first start picks a free one; restarts keep it
        self.state_dir = tempfile.mkdtemp(prefix="enginedead-soak-state-")

    @property
    def current(self) -> Incarnation | None:
        return self.incarnations[-1] if self.incarnations else None

    @property
    def server(self) -> SoakServer | None:
        inc = self.current
        return inc.server if inc is not None and inc.exit is None else None

    def start(self) -> SoakServer:
        server = SoakServer(self.spec, self.reaper, self.port, self.state_dir)
        self.incarnations.append(Incarnation(len(self.incarnations), server, 0.0))
        server.start(self.first, self.progress)
        self.port = server.port
        now = time.monotonic()
        self.incarnations[-1].ready_at = now
        if self.exits and self.exits[-1].back_at is None:
            self.exits[-1] = dataclasses.replace(self.exits[-1], back_at=now)
        for callback in self.on_ready:
            callback(server.base_url)
        return server

    def check(self, may_restart: bool = True) -> bool:
        """Whether a server serves now: one that exited is recorded, stopped (by pid) and, while
        the budget lasts and ``may_restart``, started again."""
        inc = self.current
        if inc is None:
            return False
        if inc.exit is None:
            code = inc.server.exit_code
            if code is None:
                return True
            self._ended(inc, code, by_us=False)
        if not may_restart or (self.restarts_left is not None and self.restarts_left <= 0):
            return False
        if self.restarts_left is not None:
            self.restarts_left -= 1
        self.restarts += 1
        if self.progress:
            self.progress(f"the server exited ({inc.exit.code if inc.exit else '?'}): restarting it "
                          f"(restart {self.restarts})", done=True)
        self.start()
        return True

    def end_current(self, by_us: bool = True) -> None:
        """Stop the server now (the run is over, or it hung past what the soak waits)."""
        inc = self.current
        if inc is not None and inc.exit is None:
            self._ended(inc, inc.server.exit_code, by_us=by_us)

    def _ended(self, inc: Incarnation, code: int | None, by_us: bool) -> None:
        t = time.monotonic()
        server = inc.server
        if not server.stopped:
            with contextlib.suppress(RuntimeError):
                server.stop()
        if code is None:
            code = server.exit_code
        inc.exit = Exit(inc.number, t, code, by_us)
        self.exits.append(inc.exit)

    def close(self) -> None:
        """Remove the guard state directory (once every start was stopped)."""
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def procs(self) -> list[ProcRef]:
        return [r for inc in self.incarnations for r in inc.server.procs]

    def shm(self) -> set[str]:
        return set().union(*(inc.server.shm for inc in self.incarnations)) if self.incarnations else set()


@dataclass
class ProbeTally:
    """What ``enginedead probe`` said while the run went on."""

    runs: int = 0
    alive: int = 0
    not_alive: int = 0
    #: (t, alive, the probe's line) each time its answer changed
    changes: list[tuple[float, bool, str]] = field(default_factory=list)
    #: (t, alive) of every answer
    answers: list[tuple[float, bool]] = field(default_factory=list)

    def add(self, t: float, alive: bool, why: str) -> None:
        self.runs += 1
        self.answers.append((t, alive))
        if alive:
            self.alive += 1
        else:
            self.not_alive += 1
        if not self.changes or self.changes[-1][1] != alive:
            self.changes.append((t, alive, why))


def rss_of(server: Server) -> tuple[int, int] | None:
    """(engine core RSS, workers' RSS summed) in bytes, or None while either is not found."""
    core, workers = 0, 0
    for ref in list(server.procs):
        proc = ref.process()
        if proc is None:
            continue
        with contextlib.suppress(psutil.Error):
            line = reading.command_line(proc)
            rss = int(proc.memory_info().rss)
            if line.startswith(releases.ENGINE_CORE_TITLE):
                core += rss
            elif line.startswith(releases.WORKER_TITLE):
                workers += rss
    return (core, workers) if core and workers else None


class Monitor:
    """A thread that samples RSS every ``every_s`` and asks the probe every ``probe_every_s`` (every
    second while a hang or kill is in force, to see when it says so)."""

    def __init__(self, supervisor: Supervisor, every_s: float = 2.0, probe_every_s: float = 3.0) -> None:
        self.supervisor = supervisor
        self.every_s = every_s
        self.probe_every_s = probe_every_s
        self.probes = ProbeTally()
        self.fatal_open = False  # a hang or kill is in force: RSS then says nothing of leaks
        #: while a hang or kill is in force: (t, {worker: cores}) each second, what each worker did
        self.fault_cpu: list[tuple[float, dict[str, float]]] = []
        self._cpu_last: tuple[float, dict[str, float]] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="enginedead-soak-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _worker_cpu(self, server: Server) -> None:
        """While a hang or kill is in force: each worker's CPU use (cores) since the last look."""
        if not self.fatal_open:
            self._cpu_last = None
            return
        now, seconds = time.monotonic(), worker_cpu_seconds(server)
        last, self._cpu_last = self._cpu_last, (now, seconds)
        if last is not None and now > last[0]:
            cores = {k: round((v - last[1].get(k, v)) / (now - last[0]), 2) for k, v in seconds.items()}
            self.fault_cpu.append((now, cores))

    def _run(self) -> None:
        next_probe = time.monotonic()
        while not self._stop.wait(1.0 if self.fatal_open else self.every_s):
            inc = self.supervisor.current
            if inc is None or inc.exit is not None or inc.ready_at == 0.0:
                continue
            server = inc.server
            with contextlib.suppress(Exception):
                sample = rss_of(server)
                if sample is not None and not self.fatal_open:
                    inc.rss.append((time.monotonic(), *sample))
            with contextlib.suppress(Exception):
                self._worker_cpu(server)
            now = time.monotonic()
            if now >= next_probe and server.proc is not None and server.exit_code is None:
                next_probe = now + (1.0 if self.fatal_open else self.probe_every_s)
                with contextlib.suppress(Exception):
                    answer = probe(pid=server.proc.pid)
                    if server.exit_code is None and not server.stopped:
                        self.probes.add(now, answer.alive, answer.reason)


def worker_cpu_seconds(server: Server) -> dict[str, float]:
    """CPU seconds (children counted) of each worker of ``server``, by its title and pid."""
    out = {}
    for ref in list(server.procs):
        proc = ref.process()
        if proc is not None and reading.command_line(proc).startswith(releases.WORKER_TITLE):
            out[f"{reading.title(proc).split()[0]} pid {proc.pid}"] = reading.cpu_seconds(proc)
    return out


def rss_drift(incarnations: list[Incarnation], warmup_s: float, least_s: float) -> dict[str, Any]:
    """Engine core's and workers' RSS from warm-up to the end of each incarnation that served at
    least ``least_s`` after its warm-up: the largest drift of each, in percent."""
    drifts: list[dict[str, Any]] = []
    for inc in incarnations:
        samples = [s for s in inc.rss if s[0] >= inc.ready_at + warmup_s]
        if len(samples) < 2 or samples[-1][0] - samples[0][0] < least_s:
            continue
        first, last = samples[0], samples[-1]
        drifts.append({
            "incarnation": inc.number, "minutes": round((last[0] - first[0]) / 60, 1),
            "engine_core_pct": round((last[1] - first[1]) / first[1] * 100, 2),
            "workers_pct": round((last[2] - first[2]) / first[2] * 100, 2),
            "engine_core_mib": [round(first[1] / 2**20), round(last[1] / 2**20)],
            "workers_mib": [round(first[2] / 2**20), round(last[2] / 2**20)],
        })
    if not drifts:
        return {"engine_core": None, "workers": None, "measured": []}
    return {"engine_core": max(d["engine_core_pct"] for d in drifts),
            "workers": max(d["workers_pct"] for d in drifts), "measured": drifts}
