"""What the guard in ``VLLM::EngineCore`` writes: its decisions, its start-up record, its state.

The harness reads the first two from the engine's run directory; a liveness probe
(``enginedead probe``) reads the state from the guard's state directory.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .control import write_whole
from .decisions import GuardAction, Verdict
from .names import ENV_DIR, STATE_DIR_ENV

GUARD_EVENTS_FILE = "guard-events.jsonl"


@dataclass(frozen=True)
class GuardEvent:
    """One decision of the guard inside the engine core (see guard.py).

    ``action`` says what it did and ``verdict`` what it found; ``outcome`` is the same
    decision in words, for people (no code reads it).
    """

    method: str  # "execute_model" / "sample_tokens"
    step: int  # the engine core's count of execute_model RPCs
    batch: int
    waited_s: float  # how long the RPC had run when the guard decided
    deadline_s: float  # vLLM's deadline for it
    cap_s: float  # the guard's hard cap
    verdict: Verdict
    action: GuardAction
    outcome: str  # "waiting up to 1240 s", "ending the wait", "past the cap", ...
    pid: int  # the worker judged (with several ranks: the busiest)
    t: float  # time.monotonic() of the decision
    #: that worker's rank (vLLM's global rank), None where the record predates ranks
    rank: int | None = None
    #: how many ranks the engine has
    ranks: int = 1
    #: on several nodes: the node of the worker judged (``pid`` is then its pid on that node)
    node: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON holds it: the verdict by name, the action by value."""
        return {**asdict(self), "verdict": self.verdict.name, "action": self.action.value}

    def to_line(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GuardEvent:
        """The event a ``to_dict`` wrote; ``ValueError``/``TypeError``/``KeyError`` if it is not one."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["verdict"] = Verdict.parse(data["verdict"])
        known["action"] = GuardAction.parse(data["action"])
        return cls(**known)


def guard_events_path(run_dir: str) -> str:
    return os.path.join(run_dir, GUARD_EVENTS_FILE)


def read_guard_events(path: str) -> list[GuardEvent]:
    """The guard's decisions, in order; a torn or foreign line is skipped."""
    events = []
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            try:
                events.append(GuardEvent.from_dict(json.loads(line)))
            except (ValueError, TypeError, KeyError, AttributeError):
                continue
    return events


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
    write_whole(core_ready_path(run_dir), ready.to_json())


def read_core_ready(run_dir: str) -> CoreReady | None:
    """The engine core's record, or None while it has written none (or none that parses)."""
    try:
        with open(core_ready_path(run_dir)) as f:
            return CoreReady.from_json(f.read())
    except (OSError, ValueError, TypeError):
        return None


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
    verdict: Verdict | None = None  # at the last look
    cores: float = 0.0  # the worker's CPU use at the last look
    worker: int = 0
    #: the guard ended the engine's wait: ``END`` (idle for hang_s) or ``CAP`` (past its cap)
    ended: GuardAction | None = None
    #: on several nodes: the node of the worker judged (``worker`` is its pid on that node)
    node: int | None = None
    #: on several nodes: a rank whose progress stopped arriving, in words (``node 1 TP1``)
    silent: str | None = None
    #: what the judged rank was found doing, in words (``contract.judge``'s reason)
    reason: str = ""
    #: its step's layers finished, of how many (0 of 0: its layers are not seen)
    layer: int = 0
    layers: int = 0
    #: when its step's forward pass ends at its pace so far, in seconds from ``updated`` (None: not known)
    ends_in_s: float | None = None

    def to_json(self) -> str:
        data = asdict(self)
        data["verdict"] = self.verdict.name if self.verdict else None
        data["ended"] = self.ended.value if self.ended else None
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GuardState:
        data = json.loads(text)
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["verdict"] = Verdict.read(known.get("verdict"))
        ended = known.get("ended")
        known["ended"] = None if ended is None else GuardAction.parse(ended)
        if known["ended"] is not None and not known["ended"].ends:  # a wait it let go on ended nothing
            raise ValueError(f"ended: {ended!r} is not an action that ends the engine")
        return cls(**known)


def write_guard_state(path: str, state: GuardState) -> None:
    write_whole(path, state.to_json())


def read_guard_state(path: str) -> GuardState | None:
    """A guard's state, or None (none written, or unreadable)."""
    try:
        with open(path) as f:
            return GuardState.from_json(f.read())
    except (OSError, ValueError, TypeError):
        return None
