"""The liveness probe that tells a slow engine from a hung one (``enginedead probe``).

Operators' probes ask the server (``GET /health``, a 1-token completion): ``/health``
answers 200 through a long step and through a hang alike, and a completion queues
behind the running step, so it calls a slow engine dead.  This probe asks neither.
It finds the server's process (by its listening port or pid), the engine cores
below it and their workers, and reads what the guard inside each engine core
already knows (``GuardState``): the step in flight, how long it has run,
when its worker last showed progress.  Nothing it does waits on the server.

* alive and computing, or idle between steps, or idle inside a step for less
  than ``hang_s`` → alive (exit 0);
* idle inside a step for ``hang_s`` or more, a wait the guard ended, or an engine
  core / worker gone → not alive (exit 1).

Without the guard it can only see processes: alive is alive (it says so).

On several nodes (``ENGINEDEAD_PROGRESS_DIR`` in the engine core's environment) the other
nodes' ranks are read from the progress they publish: one whose progress stopped arriving
is gone (not alive), one that computes counts as computing; the answer names the node.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from ...contract.collectives import in_collective_since
from ...contract.decisions import GuardAction, Verdict
from ...contract.guardfiles import GuardState, guard_state_path, read_guard_state, state_dir
from ...contract.judge import EngineJudgement, RankEvidence, judge_ranks
from ...contract.names import PROGRESS_DIR_ENV
from ...contract.stepprogress import read_step_progress
from ...logic import releases
from ...process import reading
from ...process.remote import RemoteLook, RemoteRanks

#: The guard rewrites its state every 0.25 s while a step runs long: older is stale.
STALE_S = 2.0

#: How long the probe looks at a worker's CPU when it must judge for itself: a look shorter than a
#: second must hold a second's busy share (``decisions.busy``), a tenth of a core here, which a
#: computing worker shows on a loaded box and a sleeper's stray ticks do not
LOOK_S = 0.5


@dataclass(frozen=True)
class StepNow:
    """The step in flight past its first look, as the probe found it."""

    step: int
    batch: int
    ran_s: float
    deadline_s: float
    #: its layers finished, of how many (0 of 0: its layers are not seen)
    layer: int
    layers: int
    #: when its forward pass ends at its pace so far, in seconds from now (None: not known)
    ends_in_s: float | None
    #: what its worker was found doing, in the judge's words
    doing: str


@dataclass(frozen=True)
class Answer:
    """The probe's answer: alive or not, the one line that says why (``reason``), and the step in
    flight when one runs long."""

    alive: bool
    reason: str
    step: StepNow | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.alive else 1

    def to_dict(self) -> dict[str, Any]:
        """As ``enginedead probe --json`` prints it."""
        return {"alive": self.alive, "exit_code": self.exit_code, "reason": self.reason,
                "step": None if self.step is None else asdict(self.step)}


class NotFound(Exception):
    """No server to probe where the probe was pointed."""


def listening_pid(port: int) -> int:
    """The pid of the process listening on TCP ``port``."""
    with contextlib.suppress(psutil.Error):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return conn.pid
    raise NotFound(f"nothing listens on port {port}")


def engine_cores(front: psutil.Process) -> list[psutil.Process]:
    """The ``VLLM::EngineCore`` processes below a serving process."""
    with contextlib.suppress(psutil.Error):
        return [p for p in front.children(recursive=True)
                if reading.command_line(p).startswith(releases.ENGINE_CORE_TITLE)]
    return []


def workers(core: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [p for p in core.children(recursive=True)
                if reading.command_line(p).startswith(releases.WORKER_TITLE)]
    return []


def environ_of(core: psutil.Process) -> dict[str, str]:
    """The environment the engine core started with.

    vLLM retitles its processes (setproctitle), which overwrites what
    ``/proc/PID/environ`` shows; the nearest ancestor whose environment is whole (it
    has ``PATH``) handed it down unchanged.
    """
    proc: psutil.Process | None = core
    while proc is not None:
        with contextlib.suppress(psutil.Error):
            environ = proc.environ()
            if "PATH" in environ:
                return environ
        try:
            proc = proc.parent()
        except psutil.Error:
            return {}
    return {}


def _state_of(core: psutil.Process) -> GuardState | None:
    directory = state_dir(environ_of(core))
    return read_guard_state(guard_state_path(directory, core.pid))


def remote_ranks(core: psutil.Process) -> list[RemoteLook]:
    """The other nodes' ranks of this engine core, one look at what they published (none on one node)."""
    directory = environ_of(core).get(PROGRESS_DIR_ENV)
    if not directory:
        return []
    try:
        born = core.create_time()
    except psutil.Error:
        return []
    return RemoteRanks(directory, since_wall=born).look()


def remote_gone(looks: list[RemoteLook]) -> Answer | None:
    """Not alive when another node's rank has gone silent; None when every one still speaks."""
    gone = next((lk for lk in looks if lk.gone), None)
    if gone is None:
        return None
    return Answer(False, f"dead: {gone.label} ({gone.record.title}, pid {gone.record.pid} on host "
                         f"{gone.record.host}) sent no progress for {gone.silent_s:.1f} s")


def _worker(state: GuardState) -> str:
    """The worker the guard judged, with its node on several."""
    node = f" on node {state.node}" if state.node is not None else ""
    return f"VLLM::Worker pid {state.worker}{node}"


def _doing(state: GuardState) -> str:
    """What the guard found the judged rank doing: its judge's words, else (an older guard) its CPU."""
    return state.reason or f"at {state.cores * 100:.0f} % CPU"


def answer_for(state: GuardState | None, now: float, look: EngineJudgement | None) -> Answer:
    """The answer for one engine core from its guard state (None: the guard is off).

    ``look`` is the probe's own judgement of the ranks (``contract.judge``), taken only when the
    state cannot say (off, or stale); None when not taken.
    """
    if state is None:  # without the guard no progress is kept: its CPU is all the probe sees
        seen = look.busiest() if look is not None else None
        doing = "computing" if seen is not None and seen.evidence.busy else "idle"
        return Answer(True, f"alive: the worker is {doing}; the guard is off here, so slow and hung "
                            "look alike (set ENGINEDEAD_GUARD=1 on the server)")
    ended = _ended(state)
    if ended is not None:
        return ended
    if not state.in_step:
        return Answer(True, "alive: no step is running long")
    return _in_step(state, now, look)


def _ended(state: GuardState) -> Answer | None:
    """Not alive when the guard ended the step's wait (or its cap did); None while it waits."""
    if state.ended is GuardAction.END:
        if state.verdict is Verdict.DEAD and state.silent:
            return Answer(False, f"dead: the guard ended step {state.step}: {state.silent} sent no progress "
                                 f"and no rank computed for {state.updated - state.busy_at:.1f} s")
        return Answer(False, f"hung: the guard ended step {state.step} after {_worker(state)} showed no "
                             f"work for {state.updated - state.busy_at:.1f} s ({_doing(state)})")
    if state.ended is GuardAction.CAP:
        return Answer(False, f"dead: step {state.step} outlived the guard's {state.cap_s:g} s cap")
    return None


def _last_work(state: GuardState, now: float, look: EngineJudgement | None) -> tuple[float, str]:
    """(when the step last showed work, what its rank was found doing): the guard's state, or the
    probe's own look where the engine core stopped rewriting it."""
    busy_at, doing = state.busy_at, _doing(state)
    stale = now - state.updated > STALE_S
    if stale and look is not None:
        seen = look.busiest()
        busy_at = max(busy_at, look.active_at or busy_at)
        doing = seen.reason if seen is not None else doing
    elif not stale and state.verdict is Verdict.SLOW:
        busy_at = max(busy_at, state.updated)
    return busy_at, doing


def _in_step(state: GuardState, now: float, look: EngineJudgement | None) -> Answer:
    """A step running long: alive while it shows work within ``hang_s``, hung after."""
    ran = now - state.sent
    busy_at, doing = _last_work(state, now, look)
    idle = now - busy_at
    where = f"step {state.step} (batch {state.batch}) has run {ran:.1f} s (deadline {state.deadline_s:g} s)"
    ends = None if state.ends_in_s is None else max(0.0, state.ends_in_s - (now - state.updated))
    step = StepNow(state.step, state.batch, round(ran, 2), state.deadline_s, state.layer, state.layers,
                   None if ends is None else round(ends, 1), doing)
    if idle < state.hang_s:
        if idle < 1.0:
            return Answer(True, f"alive, computing: {where}; {_worker(state)} {doing}; "
                                f"the guard waits up to {state.cap_s:g} s", step)
        return Answer(True, f"alive: {where}; {_worker(state)} {doing}; no work for {idle:.1f} s, hung at "
                            f"{state.hang_s:g} s", step)
    return Answer(False, f"hung: {where}; {_worker(state)} {doing}; no work for {idle:.1f} s "
                         f"(hang_s {state.hang_s:g} s)", step)


def probe(port: int | None = None, pid: int | None = None) -> Answer:
    """Probe the server listening on ``port`` (or the serving process ``pid``)."""
    try:
        front_pid = pid if pid is not None else listening_pid(port if port is not None else 8000)
        front = psutil.Process(front_pid)
    except NotFound as exc:
        return Answer(False, f"dead: {exc}")
    except psutil.Error:
        return Answer(False, f"dead: no process {pid}")
    if not reading.alive(front):
        return Answer(False, f"dead: the serving process pid {front.pid} has exited")
    cores = engine_cores(front)
    if not cores:
        return Answer(False, f"dead: no {releases.ENGINE_CORE_TITLE} below pid {front.pid}")
    answers = [_answer_for_core(core) for core in cores]
    dead = [a for a in answers if not a.alive]
    return dead[0] if dead else answers[0]


def _answer_for_core(core: psutil.Process) -> Answer:
    """One engine core: dead if it or a worker of its has exited, else what its guard state
    says, with the probe's own look at its workers' CPU where the state cannot say."""
    if not reading.alive(core):
        return Answer(False, f"dead: {releases.ENGINE_CORE_TITLE} pid {core.pid} has exited")
    procs = workers(core)
    gone = [p.pid for p in procs if not reading.alive(p)]
    if not procs or gone:
        return Answer(False, f"dead: {releases.WORKER_TITLE} of engine core {core.pid} "
                             f"{'gone' if not procs else 'exited (pid ' + str(gone[0]) + ')'}")
    remote = remote_ranks(core)  # the other nodes' ranks, from what they publish
    silent = remote_gone(remote)
    if silent is not None:
        return silent
    state = _state_of(core)
    now = time.monotonic()
    look = None
    if state is None or (state.in_step and now - state.updated > STALE_S):
        look = own_look(core, procs, remote, state)
        now = time.monotonic()
    return answer_for(state, now, look)


def own_look(core: psutil.Process, procs: list[psutil.Process], remote: list[RemoteLook],
             state: GuardState | None) -> EngineJudgement:
    """The probe's own judgement of an engine core's ranks, when its guard's state cannot say: each
    worker's CPU over a short look (its compilers' counted), its step progress and collective where
    it keeps them (under the guard), and the other nodes' ranks as they published them."""
    cores = reading.look(procs, LOOK_S)
    now = time.monotonic()
    directory = state_dir(environ_of(core))
    evidence = []
    for proc, used in zip(procs, cores, strict=True):
        progress = read_step_progress(directory, proc.pid)
        since = in_collective_since(directory, proc.pid)
        evidence.append(RankEvidence(
            reading.title(proc), True, used, LOOK_S, progress.in_step if progress is not None else True,
            progress, now - since if since is not None else None))
    window = state.hang_s if state is not None else None
    return judge_ranks([*evidence, *(lk.judgement.evidence for lk in remote)], now, window)
