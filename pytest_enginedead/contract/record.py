"""What the harness and the code inside vLLM exchange through an engine's run directory.

``worker.py`` (inside ``VLLM::Worker``) writes the step record and the stack dumps
and reads its fault instructions; the harness (``engine.py``, ``assertions.py``,
``report.py``) reads them.  Both sides take the file names, the record's keys and
its line templates from here, so neither can drift from the other.  Nothing here
imports pytest or vLLM: this module is loaded inside vLLM's processes.

The step record, ``steps-<pid>.jsonl``, is one JSON object per line, each appended
with a single ``write``: ``{"e": "b", "i": 3, "n": 64, "k": 64, "c": 8192, "w": 8192,
"t": 1234.5}`` begins step 3 with batch 64 at ``time.monotonic()`` 1234.5; it
schedules 64 tokens whose queries attend 8192 keys in all (``w``: with each query's
keys capped at the sliding window; -1 where unknown); ``e`` ends it.  V1 steps have
a second RPC, ``sample_tokens``, recorded as the same step's ``sb`` / ``se`` phase.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import signal
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: Set in an engine's environment: the run directory (the worker plugin is inert without it).
ENV_DIR = "ENGINEDEAD_WORKER_DIR"
#: The harness's own pid: the plugin never activates in the harness process itself.
ENV_HARNESS_PID = "ENGINEDEAD_HARNESS_PID"
#: The harness asks a worker for its Python stack with this signal.
STACK_SIGNAL = signal.SIGUSR2
#: A worker told to crash exits with this status.
CRASH_EXIT_CODE = 86

# --- the step record ----------------------------------------------------------------

KEY_EVENT, KEY_STEP, KEY_BATCH, KEY_TIME = "e", "i", "n", "t"
#: what the step scheduled: tokens, keys attended (summed over its tokens), the same capped at the window
KEY_TOKENS, KEY_CONTEXT, KEY_WINDOW_CONTEXT = "k", "c", "w"
BEGIN, END, SAMPLE_BEGIN, SAMPLE_END = "b", "e", "sb", "se"

# byte templates: the worker formats one line with ``%`` per record, no json.dumps
BEGIN_LINE = (
    b'{"%s":"%s","%s":%%d,"%s":%%d,"%s":%%.6f}\n'
    % (KEY_EVENT.encode(), BEGIN.encode(), KEY_STEP.encode(), KEY_BATCH.encode(), KEY_TIME.encode())
)
#: the begin line with what the step scheduled (step, batch, tokens, context, window context, time)
BEGIN_SHAPE_LINE = (
    b'{"%s":"%s","%s":%%d,"%s":%%d,"%s":%%d,"%s":%%d,"%s":%%d,"%s":%%.6f}\n'
    % (KEY_EVENT.encode(), BEGIN.encode(), KEY_STEP.encode(), KEY_BATCH.encode(), KEY_TOKENS.encode(),
       KEY_CONTEXT.encode(), KEY_WINDOW_CONTEXT.encode(), KEY_TIME.encode())
)


def attended_keys(first: int, last: int, window: int | None = None) -> int:
    """What the record's context counts: keys attended by queries that see ``first``..``last``
    keys each (a chunk's tokens, in order), each capped at ``window`` if given."""
    if last < first:
        return 0
    if window is None or last <= window:
        return (first + last) * (last - first + 1) // 2
    if first >= window:
        return window * (last - first + 1)
    return (first + window) * (window - first + 1) // 2 + window * (last - window)


def _phase_line(event: str) -> bytes:
    return b'{"%s":"%s","%s":%%d,"%s":%%.6f}\n' % (
        KEY_EVENT.encode(), event.encode(), KEY_STEP.encode(), KEY_TIME.encode()
    )


END_LINE = _phase_line(END)
SAMPLE_BEGIN_LINE = _phase_line(SAMPLE_BEGIN)
SAMPLE_END_LINE = _phase_line(SAMPLE_END)


def steps_path(run_dir: str, pid: int) -> str:
    """The step record one worker process writes."""
    return os.path.join(run_dir, f"steps-{pid}.jsonl")


def stack_path(run_dir: str, pid: int) -> str:
    """Where one worker's faulthandler writes its stack on ``STACK_SIGNAL``."""
    return os.path.join(run_dir, f"stack-{pid}.txt")


#: The first line of a stack file names the main thread, to pick it out of a dump.
MAIN_THREAD_PREFIX = "main-thread "


def deadline_stack_path(run_dir: str, pid: int) -> str:
    """The worker's own stack at the deadline of its latest step that outlived it."""
    return os.path.join(run_dir, f"deadline-stack-{pid}.txt")


#: The first line of a deadline stack: ``deadline-stack step=12 phase=execute_model ...``.
DEADLINE_HEADER = "deadline-stack"
#: Each sample of the main thread before the deadline starts with this line.
SAMPLE_HEADER = "sample "


def sample_block(before_s: float, frames: list[str]) -> str:
    """One sample in a deadline stack: a header line, then its frames as faulthandler writes them."""
    return f"{SAMPLE_HEADER}{before_s:.3f} s before the deadline\n" + "".join(f"{ln}\n" for ln in frames)


@dataclass(frozen=True)
class DeadlineStack:
    """A stack the worker dumped itself when one of its steps reached the deadline in force."""

    step: int
    phase: str  # "execute_model" / "sample_tokens"
    deadline_s: float
    ran_s: float  # how long the phase had run when the dump was taken
    at: float  # time.monotonic() of the dump
    text: str  # MAIN_THREAD_PREFIX line + faulthandler's all-threads dump, at the deadline
    #: the main thread's frames sampled during the step until the dump (``sample_block``s)
    samples: tuple[str, ...] = ()

    def header(self, samples: int = 0) -> str:
        return (
            f"{DEADLINE_HEADER} step={self.step} phase={self.phase} deadline={self.deadline_s:g} "
            f"ran={self.ran_s:.6f} at={self.at:.6f} samples={samples}\n"
        )


def read_deadline_stack(path: str) -> DeadlineStack | None:
    """The latest deadline stack of one worker, or None (none written, or unreadable)."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        with open(path) as f:
            first = f.readline()
            rest = f.read()
        if not first.startswith(DEADLINE_HEADER):
            return None
        words = dict(w.split("=", 1) for w in first.split()[1:])
        text, *samples = rest.split("\n" + SAMPLE_HEADER)
        return DeadlineStack(
            int(words["step"]), words["phase"], float(words["deadline"]), float(words["ran"]),
            float(words["at"]), text + "\n", tuple(SAMPLE_HEADER + s for s in samples),
        )
    return None


@dataclass(frozen=True)
class StepTime:
    """One step as the worker saw it; ``seconds`` is None while it runs."""

    step: int
    batch_size: int
    started: float  # time.monotonic() in the worker (a system-wide clock)
    seconds: float | None
    pid: int
    #: what vLLM scheduled (None where the record does not say): tokens, and the keys
    #: their queries attend, summed; the same with each capped at the sliding window
    tokens: int | None = None
    context_tokens: int | None = None
    window_context_tokens: int | None = None

    @property
    def running(self) -> bool:
        return self.seconds is None


def parse_steps(lines: Iterable[str], pid: int) -> list[StepTime]:
    """Steps from record lines; a step's time is ``execute_model`` plus ``sample_tokens``.

    A step is running while either phase is.  A torn last line (being written) is
    skipped.
    """
    times: dict[int, dict[str, float]] = {}
    batch: dict[int, int] = {}
    shape: dict[int, tuple[int | None, int | None, int | None]] = {}
    for line in lines:
        try:
            rec = json.loads(line)
            event, step, t = rec[KEY_EVENT], int(rec[KEY_STEP]), float(rec[KEY_TIME])
        except (ValueError, KeyError, TypeError):
            continue
        times.setdefault(step, {})[event] = t
        if event == BEGIN:
            batch[step] = int(rec.get(KEY_BATCH, 0))
            shape[step] = (_count(rec, KEY_TOKENS), _count(rec, KEY_CONTEXT), _count(rec, KEY_WINDOW_CONTEXT))
    steps = []
    for i, at in sorted(times.items()):
        if BEGIN not in at:
            continue
        running = END not in at or (SAMPLE_BEGIN in at and SAMPLE_END not in at)
        seconds = None
        if not running:
            seconds = at[END] - at[BEGIN]
            if SAMPLE_BEGIN in at:
                seconds += at[SAMPLE_END] - at[SAMPLE_BEGIN]
        steps.append(StepTime(i, batch[i], at[BEGIN], seconds, pid, *shape[i]))
    return steps


def _count(rec: Mapping[str, Any], key: str) -> int | None:
    """A count the record may lack (older writers) or mark unknown (-1)."""
    value = rec.get(key)
    return value if isinstance(value, int) and value >= 0 else None


def read_steps(path: str, pid: int) -> list[StepTime]:
    """One worker's step record (empty if it has written none)."""
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        return parse_steps(f, pid)
    return []


@dataclass(frozen=True)
class StepStats:
    """Finished steps: count, median and longest, and the largest batch seen.

    ``max_running``: the longest is a step still running (cut short by a deadline),
    measured up to the moment of the summary.
    """

    steps: int
    p50_s: float | None
    max_s: float | None
    max_running: bool
    max_batch: int


def summarize(steps: Iterable[StepTime], now: float | None = None) -> StepStats:
    """Count, p50 and max of finished steps; given ``now``, a running step counts too."""
    steps = list(steps)
    done = [s.seconds for s in steps if s.seconds is not None]
    longest = max(done) if done else None
    running = False
    if now is not None:
        for s in steps:
            if s.seconds is None and (longest is None or now - s.started > longest):
                longest, running = now - s.started, True
    return StepStats(
        steps=len(done),
        p50_s=statistics.median(done) if done else None,
        max_s=longest,
        max_running=running,
        max_batch=max((s.batch_size for s in steps), default=0),
    )


def worst_by_batch(steps: Iterable[StepTime]) -> dict[int, float]:
    """The longest finished step per batch size (what ``headroom`` is judged on)."""
    worst: dict[int, float] = {}
    for s in steps:
        if s.seconds is not None:
            worst[s.batch_size] = max(worst.get(s.batch_size, 0.0), s.seconds)
    return worst


# --- the faults ---------------------------------------------------------------------


@dataclass(frozen=True)
class Injection:
    """Faults applied in the worker; steps are counted from 1, empty steps skipped."""

    slow_s_per_seq: float = 0.0
    hang_at_step: int | None = None
    crash_at_step: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Injection:
        return cls(**data)

    @property
    def active(self) -> bool:
        return bool(self.slow_s_per_seq or self.hang_at_step or self.crash_at_step)

    def describe(self) -> str:
        parts = []
        if self.slow_s_per_seq:
            parts.append(f"busy {self.slow_s_per_seq:g} s/seq")
        if self.hang_at_step:
            parts.append(f"hang at step {self.hang_at_step}")
        if self.crash_at_step:
            parts.append(f"crash at step {self.crash_at_step}")
        return ", ".join(parts) or "none"


# --- the control file: what the harness tells the code inside vLLM, per test ----------

CONTROL_FILE = "control.json"


@dataclass(frozen=True)
class Control:
    """The deadline and faults in force from now on, written by the harness per test.

    ``epoch`` grows with every write: the worker counts fault steps from the step
    that follows a new epoch, so ``hang_at_step=2`` means this test's second step.
    ``deadline_s`` None leaves vLLM's own deadline in force.
    """

    epoch: int = 0
    deadline_s: float | None = None
    injection: Injection = Injection()

    def to_json(self) -> str:
        return json.dumps(
            {"epoch": self.epoch, "deadline_s": self.deadline_s, "injection": asdict(self.injection)},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Control:
        data = json.loads(text)
        deadline = data.get("deadline_s")
        return cls(
            epoch=int(data.get("epoch", 0)),
            deadline_s=None if deadline is None else float(deadline),
            injection=Injection.from_dict(data.get("injection") or {}),
        )


def control_path(run_dir: str) -> str:
    return os.path.join(run_dir, CONTROL_FILE)


def _replace(path: str, text: str) -> None:
    """Replace a file atomically (a temporary file, then renamed): a reader sees the old or the
    new, never half."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


#: beside the control file: a stamp rewritten in place after every control write, which a
#: reader maps and compares without a syscall
CONTROL_STAMP_FILE = "control.stamp"
STAMP_BYTES = 8


def control_stamp_path(run_dir: str) -> str:
    return os.path.join(run_dir, CONTROL_STAMP_FILE)


def write_control(run_dir: str, control: Control) -> None:
    """Replace the control file atomically (a reader sees the old or the new, never half),
    then give the stamp a new value: a reader that sees it reads the new control."""
    _replace(control_path(run_dir), control.to_json())
    fd = os.open(control_stamp_path(run_dir), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, os.urandom(STAMP_BYTES), 0)
    finally:
        os.close(fd)


class ControlReader:
    """Reads the control file once per RPC, cheaply: only when the harness changed it.

    Between changes a call reads the mapped stamp and makes no syscall: in the engine core,
    whose other threads contend for the GIL while the worker's threads hold both cores, a
    ``stat`` per RPC cost ~125 µs on average (2 per step: 3 % of a 10 ms step).  Without a
    stamp (a harness before it) every call stats the control file, as before.
    """

    def __init__(self, run_dir: str) -> None:
        self.path = control_path(run_dir)
        self._stamp_path = control_stamp_path(run_dir)
        self._stamp: mmap.mmap | None = None
        self._stamp_seen: bytes | None = None
        self._seen: tuple[int, int, int] | None = None
        self._control = Control()

    def get(self) -> Control:
        stamp = self._mapped_stamp()
        now = stamp[:STAMP_BYTES] if stamp is not None else None
        if now is not None and now == self._stamp_seen:
            return self._control
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return self._control
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._seen:
            try:
                with open(self.path) as f:
                    self._control = Control.from_json(f.read())
                self._seen = key
            except (OSError, ValueError, TypeError):
                return self._control  # keep the last good control; the next RPC reads again
        self._stamp_seen = now  # the control now read is at least as new as this stamp
        return self._control

    def _mapped_stamp(self) -> mmap.mmap | None:
        if self._stamp is None:
            try:
                fd = os.open(self._stamp_path, os.O_RDONLY)
            except OSError:
                return None
            try:
                if os.fstat(fd).st_size >= STAMP_BYTES:
                    self._stamp = mmap.mmap(fd, STAMP_BYTES, prot=mmap.PROT_READ)
            except (OSError, ValueError):
                return None
            finally:
                os.close(fd)
        return self._stamp


# --- the guard's events --------------------------------------------------------------

GUARD_EVENTS_FILE = "guard-events.jsonl"


@dataclass(frozen=True)
class GuardEvent:
    """One decision of the guard inside the engine core (see guard.py)."""

    method: str  # "execute_model" / "sample_tokens"
    step: int  # the engine core's count of execute_model RPCs
    batch: int
    waited_s: float  # how long the RPC had run when the guard decided
    deadline_s: float  # vLLM's deadline for it
    cap_s: float  # the guard's hard cap
    verdict: str  # SLOW / HUNG / DEAD
    outcome: str  # "waiting up to 1240 s", "ending the wait", "past the cap", ...
    pid: int  # the worker judged
    t: float  # time.monotonic() of the decision

    def to_line(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"


def guard_events_path(run_dir: str) -> str:
    return os.path.join(run_dir, GUARD_EVENTS_FILE)


def read_guard_events(path: str) -> list[GuardEvent]:
    events = []
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            try:
                events.append(GuardEvent(**json.loads(line)))
            except (ValueError, TypeError):
                continue
    return events


# --- the engine core's start-up record: its side of the plugin, and the guard ----------

#: The engine core writes this file once its side of the plugin is in place.
CORE_READY_FILE = "core-ready.json"


def core_ready_path(run_dir: str) -> str:
    return os.path.join(run_dir, CORE_READY_FILE)


@dataclass(frozen=True)
class CoreReady:
    """What ``VLLM::EngineCore`` found when it loaded our plugin: the guard's start-up record.

    Written once by ``guard.py`` inside the engine core, read by the harness, which
    holds it against what it asked for: the guard is judged by the engine core's own
    word, not by the harness's reading of the environment it passed.
    """

    pid: int
    #: the guard is on
    guard: bool
    #: ``ENGINEDEAD_GUARD`` asked for it (it may still be off: see ``problem``)
    asked: bool = False
    #: the policy spec the guard runs (or was asked to run), as the engine core read it
    policy: str | None = None
    policy_name: str | None = None
    hang_s: float | None = None
    #: why the engine core left the guard off although it was asked, in one line
    problem: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CoreReady:
        data = json.loads(text)
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


def write_core_ready(run_dir: str, ready: CoreReady) -> None:
    """Written whole: a reader never sees half of it."""
    _replace(core_ready_path(run_dir), ready.to_json())


def read_core_ready(run_dir: str) -> CoreReady | None:
    """The engine core's record, or None while it has written none (or none that parses)."""
    try:
        with open(core_ready_path(run_dir)) as f:
            return CoreReady.from_json(f.read())
    except (OSError, ValueError, TypeError):
        return None


# --- the guard's state: what a liveness probe reads (``probe.py``) ---------------------

#: Where the guard writes its state outside the harness (inside, it goes to the run directory).
STATE_DIR_ENV = "ENGINEDEAD_GUARD_STATE_DIR"
#: Set by the serving process for the engine cores it starts: whose engine they are.
ENV_FRONT_PID = "ENGINEDEAD_FRONT_PID"
GUARD_STATE_PREFIX = "enginedead-guard-"


def state_dir(environ: Mapping[str, str]) -> str:
    """The directory an engine core with this environment writes its guard state to."""
    return (environ.get(ENV_DIR) or environ.get(STATE_DIR_ENV)
            or environ.get("TMPDIR") or "/tmp")


def guard_state_path(directory: str, core_pid: int) -> str:
    return os.path.join(directory, f"{GUARD_STATE_PREFIX}{core_pid}.json")


def guard_state_pid(name: str) -> int | None:
    """The engine core's pid in a state file's name, or None if it is not one."""
    if not (name.startswith(GUARD_STATE_PREFIX) and name.endswith(".json")):
        return None
    digits = name[len(GUARD_STATE_PREFIX):-len(".json")]
    return int(digits) if digits.isdigit() else None


@dataclass(frozen=True)
class GuardState:
    """The guard's view of its engine now, rewritten while a step runs long.

    Times are ``time.monotonic()``, which every process on one machine shares.  A step
    shorter than the guard's first look (0.5 s) is never written: ``in_step`` False
    means no long step is running.
    """

    pid: int  # the engine core
    front: int  # the serving process whose engine this is
    hang_s: float
    policy: str
    updated: float
    in_step: bool = False
    method: str = ""
    step: int = 0
    batch: int = 0
    deadline_s: float = 0.0
    cap_s: float = 0.0
    sent: float = 0.0  # when the RPC of the step in flight was sent
    busy_at: float = 0.0  # the last time its worker showed progress
    verdict: str = ""  # SLOW / HUNG / DEAD at the last look
    cores: float = 0.0  # the worker's CPU use at the last look
    worker: int = 0
    #: the guard ended the engine's wait: "HUNG" (idle for hang_s) or "CAP" (past its cap)
    ended: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GuardState:
        data = json.loads(text)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def write_guard_state(path: str, state: GuardState) -> None:
    _replace(path, state.to_json())


def read_guard_state(path: str) -> GuardState | None:
    """A guard's state, or None (none written, or unreadable)."""
    try:
        with open(path) as f:
            return GuardState.from_json(f.read())
    except (OSError, ValueError, TypeError):
        return None
