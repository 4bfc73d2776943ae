"""One soak run (``Plan``): a served engine under steady clients, a fault schedule, every decision judged.

``soak(plan)`` starts the server under a ``Supervisor`` (restart on exit), keeps the
clients of ``traffic.Traffic`` on it, and goes through the schedule: each fault is told to
the code inside vLLM the way the harness tells every fault (``Server.instruct``: the
control file the worker reads per step), or sent as client load; each makes a *window*.
At the end the server is stopped by pid, and the run is judged (``logic.soak.judge``):
the guard's decisions against the windows, the requests each death cost, RSS drift, and
what was left behind (processes, ``/dev/shm`` entries, file descriptors).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from ...contract.guardfiles import GuardEvent
from ...contract.steps import END_LINE, StepTime, steps_path, whole_lines_after
from ...logic.planning.engines import DeadlineAndFaults, EngineSpec, GuardSpec
from ...logic.soak.judge import Exit, Judgement, Limits, Outcome, Window, action_counts, judge
from ...logic.soak.schedule import SLOW_FAULT
from ..engines.leaks import Leaks
from ..engines.reaper import Reaper
from ..waiting import Progress, wait_until
from .soakfaults import Faults, Plan, Stop
from .soakprom import Watch, seen
from .supervisor import Monitor, Supervisor, rss_drift
from .traffic import Traffic

#: RSS is compared from this long after each start (the first requests allocate) ...
WARMUP_S = 30.0
#: ... in starts that served at least this long after it
DRIFT_LEAST_S = 30.0


class Soak(Faults):
    """The state of one run while it goes (see ``soak``)."""

    def __init__(self, plan: Plan, progress: Progress, reaper: Reaper | None,
                 watch: Watch | None = None) -> None:
        self.plan = plan
        self.sched = plan.schedule
        self.progress = progress
        guard = GuardSpec(self.sched.hang_s, "reference", source="the soak") if plan.guard else None
        self.spec = EngineSpec(plan.model, self.sched.max_num_seqs,
                               extra_args=(("max_model_len", self.sched.max_model_len),), guard=guard,
                               server=True, tensor_parallel=self.sched.tensor_parallel_size)
        self.first = DeadlineAndFaults(float(self.sched.deadline_s), "the soak's schedule", from_policy=False)
        self.supervisor = Supervisor(self.spec, self.first, reaper, progress, plan.restarts)
        self.monitor = Monitor(self.supervisor)
        self.traffic = Traffic(os.path.basename(plan.model.rstrip("/")), self.sched.clients,
                               timeout_s=max(120.0, 3 * self.sched.hang_s), vocab=_vocab(plan.model))
        self.supervisor.on_ready.append(self._pointed)
        self.watch = watch
        if watch is not None:
            self.supervisor.on_ready.append(watch.point)
        self.windows: list[Window] = []
        self.notes: list[str] = []
        self.guidellm: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        self.until: float | None = None
        self._last_line = 0.0
        self._counter: StepCounter | None = None

    def _pointed(self, base_url: str) -> None:
        self.traffic.base_url = base_url

    # --- waiting, with the server watched ------------------------------------------------

    def tick(self, may_restart: bool = True) -> None:
        """Restart a server that exited (while allowed: inside a window the exit is only recorded);
        print progress now and then."""
        if not self.supervisor.check(may_restart) and may_restart:
            raise Stop("the server exited and no restart is left")
        now = time.monotonic()
        if now - self._last_line >= 15.0:
            self._last_line = now
            self.progress(self.status_line())

    def over(self) -> bool:
        return self.until is not None and time.monotonic() >= self.until

    def wait(self, seconds: float, done: Callable[[], bool] = lambda: False, restart: bool = True) -> bool:
        """Wait ``seconds`` of traffic (or until ``done``); whether ``done`` came."""
        return wait_until(done, seconds, every_s=0.25, meanwhile=lambda: self.tick(restart))

    def status_line(self) -> str:
        reqs = self.traffic.snapshot()
        ok = sum(1 for r in reqs if not r.failed)
        failed = sum(1 for r in reqs if r.failed)
        ran = (time.monotonic() - self.t0) / 60
        total = f"/{self.plan.minutes:g}" if self.plan.minutes else ""
        inc = self.supervisor.current
        if inc is not None and (self._counter is None or self._counter.server is not inc.server):
            self._counter = StepCounter(inc.server)
        steps = self._counter.count() if self._counter is not None else 0
        return (f"[{self.plan.name}] {ran:.1f}{total} min: {len(self.windows)} faults, "
                f"requests {ok} served / {failed} failed, restarts {self.supervisor.restarts}, "
                f"steps {steps} in this start")

    # --- the faults ------------------------------------------------------------------------

    def limits(self, median: bool = True) -> Limits:
        steps = [s.seconds for inc in self.supervisor.incarnations for s in _steps(inc.server)
                 if s.seconds is not None] if median else []
        return Limits(float(self.sched.deadline_s), self.sched.hang_s, self.plan.guard,
                      self.sched.tensor_parallel_size, statistics.median(steps) if steps else 0.0)

    # --- the run ---------------------------------------------------------------------------

    def go(self) -> None:
        self.supervisor.start()
        self.traffic.start(self.supervisor.server.base_url if self.supervisor.server else "")
        self.monitor.start()
        self.t0 = time.monotonic()
        if self.plan.minutes is not None:
            self.until = self.t0 + self.plan.minutes * 60
        passes = range(1) if self.plan.minutes is None or not self.sched.repeat else itertools.count()
        try:
            for _ in passes:
                for fault in self.sched.faults:
                    if self.over():
                        raise Stop("time is up")
                    left = fault.after_s
                    if self.until is not None:
                        left = min(left, self.until - time.monotonic())
                    self.wait(max(0.0, left))
                    if self.over():
                        raise Stop("time is up")
                    self.run_fault(fault)
                    last = fault is self.sched.faults[-1]
                    self.tick(may_restart=not (last and self.plan.minutes is None))
            if self.until is not None:
                self.wait(max(0.0, self.until - time.monotonic()))
        except Stop as why:
            self.notes.append(f"run ended: {why}")


def _vocab(model: str) -> int:
    try:
        with open(os.path.join(model, "config.json")) as f:
            return int(json.load(f).get("vocab_size", 1000))
    except (OSError, ValueError, TypeError):
        return 1000


def _steps(server: Any) -> list[StepTime]:
    steps: list[StepTime] = server.evidence.steps()
    return steps


class StepCounter:
    """Finished steps of a server so far, counted from its records' new bytes at each look."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.offsets: dict[int, int] = {}
        self.ends: dict[int, int] = {}

    def count(self) -> int:
        for ref in list(self.server.procs):
            whole = whole_lines_after(steps_path(self.server.run_dir, ref.pid), self.offsets.get(ref.pid, 0))
            self.offsets[ref.pid] = self.offsets.get(ref.pid, 0) + len(whole)
            self.ends[ref.pid] = self.ends.get(ref.pid, 0) + whole.count(END_MARK)
        return max(self.ends.values(), default=0)


#: how a step's end line begins in the record (``contract.steps.END_LINE``)
END_MARK = END_LINE.split(b",")[0]


def soak(plan: Plan, progress: Progress, reaper: Reaper | None = None,
         watch: Watch | None = None) -> dict[str, Any]:
    """Run ``plan`` and return its record (the JSON the soak writes per run); with ``watch``, what
    Prometheus saw of it beside what the soak counted."""
    leaks = Leaks()
    run = Soak(plan, progress, reaper, watch)
    interrupted = False
    try:
        run.go()
    except KeyboardInterrupt:  # Ctrl-C: stop everything at once (by pid, no graceful shutdown)
        interrupted = True
        raise
    finally:
        run.traffic.stop(grace_s=0.0 if interrupted else 5.0)
        run.monitor.stop()
        if not interrupted:
            _settled(run)
        if interrupted and run.supervisor.server is not None:
            run.supervisor.server.hurry = True
        run.supervisor.end_current(by_us=True)
        run.supervisor.close()
    now = time.monotonic()
    return record(run, leaks.after(run.supervisor.procs(), run.supervisor.shm()), now)


def record(run: Soak, leaked: dict[str, Any], now: float) -> dict[str, Any]:
    """The run's record: its requests, the guard's decisions judged, steps, exits, RSS, leaks."""
    sup = run.supervisor
    steps = [s for inc in sup.incarnations for s in _steps(inc.server)]
    events: list[GuardEvent] = [e for inc in sup.incarnations for e in inc.server.evidence.guard_events()]
    requests = _all_requests(run)
    j = judge(run.windows, events, steps, sup.exits, requests, run.limits(), run.t0, now)
    return {
        "name": run.plan.name, "model": os.path.basename(run.plan.model.rstrip("/")),
        "guard": run.plan.guard, "schedule": run.sched.describe(),
        "tensor_parallel_size": run.sched.tensor_parallel_size,
        "minutes": round((now - run.t0) / 60, 2),
        "requests": requests_record(requests, j),
        "lost_to_false_death": j.lost_to_false_death, "lost_to_genuine_death": j.lost_to_genuine_death,
        "false_ends": j.false_ends if run.plan.guard else None, "missed_hangs": j.missed_hangs,
        "decisions": action_counts(j.decisions), "windows": [w.to_dict(run.t0) for w in j.windows],
        "steps": sum(_engine_steps(_steps(inc.server)) for inc in sup.incarnations),
        "step_p50_ms": step_p50_ms(steps),
        "restarts": sup.restarts, "deaths": [d.to_dict() for d in j.deaths],
        "server_exits": exit_codes(sup.exits, by_us=False),
        "stopped_by_soak": exit_codes(sup.exits, by_us=True), "probe": _probe(run),
        "rss_drift_pct": rss_drift(sup.incarnations, WARMUP_S, DRIFT_LEAST_S),
        "leaked": leaked, "guidellm": run.guidellm or None, "notes": run.notes,
        "workers_during_hangs": [{"at_s": round(t - run.t0, 1), "cores": cores}
                                 for t, cores in run.monitor.fault_cpu[:60]],
        "prometheus": _prometheus(run),
    }


def _settled(run: Soak) -> None:
    """With Prometheus, wait until it has scraped the last start's figures as they stand."""
    server = run.supervisor.server
    if run.watch is not None and server is not None and not run.watch.settle(server.base_url):
        run.notes.append("Prometheus did not scrape the server after the traffic stopped")


def _prometheus(run: Soak) -> dict[str, Any] | None:
    """What Prometheus saw against what the soak counted (``logic.soak.seen``); None without it."""
    if run.watch is None:
        return None
    try:
        return seen(run.watch, run.supervisor.incarnations, time.time() - time.monotonic()).to_dict()
    except (OSError, ValueError, RuntimeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _all_requests(run: Soak) -> list[Any]:
    """The soak's own clients' requests, then guidellm's (taken out of its outputs: the record keeps
    its summary only)."""
    requests = run.traffic.snapshot()
    for out in run.guidellm:
        requests += out.pop("records", [])
    return requests


def requests_record(requests: list[Any], j: Judgement) -> dict[str, Any]:
    """The requests counted (those the soak's stop cut are not): sent, completed, failed and why, by
    kind."""
    counted = [r for r in requests if r.outcome is not Outcome.CUT]
    failed = sum(1 for r in counted if r.failed)
    return {"sent": len(counted), "completed": len(counted) - failed, "failed": failed,
            "causes": dict(j.failures), "by_kind": _by_kind(counted),
            "cut_at_stop": len(requests) - len(counted)}


def step_p50_ms(steps: list[StepTime]) -> float | None:
    """The median finished step in milliseconds; None without one."""
    finished = [s.seconds for s in steps if s.seconds is not None]
    return round(statistics.median(finished) * 1000, 1) if finished else None


def exit_codes(exits: list[Exit], by_us: bool) -> list[int | None]:
    """The exit codes of the server's exits the soak caused (``by_us``), or of the others."""
    return [x.code for x in exits if x.by_us == by_us]


def _engine_steps(steps: list[StepTime]) -> int:
    """Finished engine steps of one server: each rank records every step, so the most of any worker."""
    per_pid: dict[int, int] = {}
    for s in steps:
        if s.seconds is not None:
            per_pid[s.pid] = per_pid.get(s.pid, 0) + 1
    return max(per_pid.values(), default=0)


def _by_kind(requests: list[Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in requests:
        row = out.setdefault(r.kind, {"sent": 0, "failed": 0})
        row["sent"] += 1
        row["failed"] += int(r.failed)
    return out


def _probe(run: Soak) -> dict[str, Any]:
    tally = run.monitor.probes
    changes = [{"at_s": round(t - run.t0, 1), "alive": alive, "said": why} for t, alive, why in tally.changes]
    slow = [w for w in run.windows if w.kind == SLOW_FAULT]
    dead_while_slow = sum(1 for t, alive in tally.answers if not alive
                          and any(w.start <= t <= w.end for w in slow))
    return {"runs": tally.runs, "alive": tally.alive, "not_alive": tally.not_alive,
            "not_alive_in_slow_windows": dead_while_slow, "changes": changes[:40]}
