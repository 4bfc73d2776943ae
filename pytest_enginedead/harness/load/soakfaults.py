"""How the soak delivers each fault of its schedule, and the window each makes (``harness.load.soak``).

Engine faults go to the code inside vLLM the way the harness gives every fault: through the
server's control file (``Server.instruct``), read by the worker at each step — a slow window
burns CPU in each step until ``steps`` of them ran past the deadline, a hang idles a step
forever, a kill exits the worker.  Load faults are client requests (``traffic.Traffic``), and
guidellm's wave its own process.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...contract.control import Injection
from ...contract.steps import StepTime, parse_steps, steps_path, whole_lines_after
from ...logic.planning.engines import DeadlineAndFaults
from ...logic.soak.judge import Limits, Window, past_deadline
from ...logic.soak.schedule import SLOW_FAULT, Fault, Schedule
from ..waiting import Progress
from .guidellm import run_guidellm
from .supervisor import Monitor, Supervisor
from .traffic import Traffic


@dataclass(frozen=True)
class Plan:
    """One run of the soak: which engine, guarded or not, which schedule, for how long."""

    name: str
    model: str
    schedule: Schedule
    guard: bool
    minutes: float | None = None  # None: one pass through the schedule
    restarts: int | None = None  # the supervisor's budget (None: no limit)
    guidellm: str | None = None  # the guidellm executable, if installed


class Stop(Exception):
    """The run's time is up, or the server is gone for good."""


class Faults:
    """The fault half of a soak run (``harness.load.soak.Soak`` is the other): one method per kind."""

    plan: Plan
    sched: Schedule
    first: DeadlineAndFaults
    progress: Progress
    supervisor: Supervisor
    monitor: Monitor
    traffic: Traffic
    windows: list[Window]
    notes: list[str]
    guidellm: list[dict[str, Any]]

    def wait(self, seconds: float, done: Callable[[], bool] = lambda: False, restart: bool = True) -> bool:
        raise NotImplementedError

    def limits(self, median: bool = True) -> Limits:
        raise NotImplementedError

    def instruct(self, injection: Injection) -> None:
        server = self.supervisor.server
        if server is not None:
            server.instruct(dataclasses.replace(self.first, injection=injection))

    def run_fault(self, fault: Fault) -> None:
        inc = self.supervisor.current
        assert inc is not None
        start = time.monotonic()
        self.progress(f"[{self.plan.name}] {fault.label()}", done=True)
        if fault.fatal:
            self.monitor.fatal_open = True
        try:
            getattr(self, f"_{fault.kind}")(fault)
        finally:
            self.monitor.fatal_open = False
            self.windows.append(Window(fault.kind, fault.label(), start, time.monotonic(), inc.number))

    def _slow(self, fault: Fault) -> None:
        """Every step burns ``over`` x the deadline at the clients' batch, until ``steps`` ran past it."""
        deadline = float(self.sched.deadline_s)
        per_seq = fault.get("over") * deadline / max(1, self.sched.clients)
        inc = self.supervisor.current
        assert inc is not None
        start = time.monotonic()
        tail = StepsSince(inc.server)
        self.instruct(Injection(slow_s_per_seq=per_seq, ranks=fault.ranks))
        limits = self.limits(median=False)
        probe_w = Window(SLOW_FAULT, "", start, math.inf, inc.number)

        def enough() -> bool:
            if inc.exit is not None or inc.server.exit_code is not None:
                return True
            past = past_deadline(tail.steps(), probe_w, limits, time.monotonic())
            return past >= int(fault.get("steps"))

        self.wait(fault.get("steps") * fault.get("over") * deadline * 4 + 30, enough, restart=False)
        self.instruct(Injection())
        # the step that was running when the fault was lifted finishes slow
        self.wait(fault.get("over") * deadline * 3 + 5,
                  lambda: inc.server.exit_code is not None or not any(s.running for s in tail.steps()),
                  restart=False)

    def _hang(self, fault: Fault) -> None:
        self._fatal(Injection(hang_at_step=1, ranks=fault.ranks), self.sched.hang_s + 60.0)

    def _spin(self, fault: Fault) -> None:
        self._fatal(Injection(spin_at_step=1, ranks=fault.ranks), self.sched.hang_s + 60.0)

    def _kill(self, fault: Fault) -> None:
        self._fatal(Injection(crash_at_step=1, ranks=fault.ranks), 60.0)

    def _fatal(self, injection: Injection, limit_s: float) -> None:
        inc = self.supervisor.current
        assert inc is not None
        self.instruct(injection)
        gone = self.wait(limit_s, lambda: inc.server.exit_code is not None, restart=False)
        if not gone:
            self.notes.append(f"the server outlived its fault by {limit_s:.0f} s: the soak stopped it")
            self.supervisor.end_current(by_us=True)
        else:
            self.supervisor.end_current(by_us=False)

    def _await(self, fut: concurrent.futures.Future[None], limit_s: float) -> None:
        self.wait(limit_s, fut.done)

    def _context_limit(self, fault: Fault) -> None:
        max_tokens = fault.get("max_tokens")
        self._await(self.traffic.context_limit(fault.get("requests"), self.sched.max_model_len - max_tokens,
                                               max_tokens), 600)

    def _disconnect(self, fault: Fault) -> None:
        self._await(self.traffic.disconnect(fault.get("requests"), fault.get("after_chunks")), 300)

    def _burst(self, fault: Fault) -> None:
        n = math.ceil(fault.get("factor") * self.sched.max_num_seqs)
        self._await(self.traffic.burst(n, fault.get("max_tokens")), 600)

    def _guidellm(self, fault: Fault) -> None:
        server = self.supervisor.server
        if self.plan.guidellm is None or server is None:
            self.notes.append(f"{fault.label()}: skipped (guidellm is not installed)")
            return
        out = run_guidellm(self.plan.guidellm, server.port, server.served_name, self.plan.model,
                           fault.get("requests"), fault.get("streams"), server.run_dir, self.wait)
        self.guidellm.append(out)


class StepsSince:
    """The steps a server's workers record from now on; each look reads only the records' new lines."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.offsets: dict[int, int] = {}
        self.lines: dict[int, list[str]] = {}
        for ref in server.procs:
            with contextlib.suppress(OSError):
                self.offsets[ref.pid] = os.path.getsize(steps_path(server.run_dir, ref.pid))

    def steps(self) -> list[StepTime]:
        out: list[StepTime] = []
        for ref in list(self.server.procs):
            whole = whole_lines_after(steps_path(self.server.run_dir, ref.pid), self.offsets.get(ref.pid, 0))
            self.offsets[ref.pid] = self.offsets.get(ref.pid, 0) + len(whole)
            self.lines.setdefault(ref.pid, []).extend(whole.decode(errors="replace").splitlines())
            out.extend(parse_steps(self.lines.get(ref.pid, []), ref.pid))
        return out
