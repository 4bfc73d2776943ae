"""Progress that travels: what each rank publishes, for the ranks and the harness on other nodes.

On several machines (vLLM's multi-node executor: ``--nnodes N``, ``--headless`` on the
other nodes) nothing on the head's machine can read a remote rank's process: its ``/proc``,
its CPU time, its stack are on another machine (or, simulated on one, in another PID
namespace).  So each rank publishes its own: every ``PUBLISH_EVERY_S`` a worker rewrites one
small JSON file in a directory every node can reach (``ENGINEDEAD_PROGRESS_DIR``):
``progress-n<node>-r<rank>.json`` with its step (number, batch, running or finished, how
long), the CPU seconds of its process tree and its CPU use over its own last window, a
sequence number and its clocks.  A reader judges the rank from it:

* a record newer than the last one it saw is the rank alive: computing when its CPU use is
  at least ``decisions.BUSY_CORES``, else idle (inside its step or between steps);
* no new record for ``SILENT_AFTER_S`` (four intervals) is the rank **gone**: judged
  ``DEAD``, never ``SLOW`` — a rank that cannot say it computes is not taken to compute.

A stack is sent when asked: a reader writes ``stack-request-n<node>-r<rank>`` holding a
token; the rank looks for requests every ``REQUEST_EVERY_S`` and answers with its
Python stack in ``stack-n<node>-r<rank>.txt`` under the same token.

Clocks: the CPU use is measured on the rank's own clock; silence on the reader's, from the
moment it saw the sequence number last change (a first look counts the record's age by wall
clock, which machines keep within milliseconds of each other with NTP).  Every file is
replaced whole (written aside, then renamed): a reader sees a whole record or the previous.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import uuid
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from .control import write_whole
from .stepprogress import Phase, StepProgress

#: A rank rewrites its record this often.
PUBLISH_EVERY_S = 0.5

#: A rank whose record has not changed for this long is gone (four intervals).
SILENT_AFTER_S = 4 * PUBLISH_EVERY_S

#: A rank looks for a stack request this often (between two records).
REQUEST_EVERY_S = 0.1

#: A rank measures its CPU use over this much of its own recent past.
CPU_WINDOW_S = 1.0

_PROGRESS_NAME = re.compile(r"^progress-n(\d+)-r(\d+)\.json$")


@dataclass(frozen=True)
class RankProgress:
    """One rank's latest record, as it published it."""

    node: int  # vLLM's node rank (``--node-rank``)
    rank: int  # vLLM's global worker rank
    pid: int  # the worker's pid on its own node (in its PID namespace)
    title: str  # its process title (``VLLM::Worker_TP1``)
    host: str  # its machine's name
    seq: int  # grows with every record
    wall: float  # time.time() when published
    mono: float  # its node's time.monotonic() when published
    cpu_s: float  # CPU seconds of its process tree (children counted)
    cores: float  # CPU use over its last ``window_s``, in cores (1.0 = one core flat out)
    window_s: float  # 0.0: too young for a rate
    step: int = 0  # its latest step (0: none yet)
    batch: int = 0
    running: bool = False  # that step runs now
    ran_s: float = 0.0  # how long it has run (running) or took (finished)
    steps: int = 0  # steps it finished
    ended: bool = False  # the worker is exiting: its last record
    #: its step's progress inside its layers (``contract.stepprogress``), each time as an age at
    #: publishing (machines share no monotonic clock); ``layered`` False: it keeps none
    layered: bool = False
    phase: int = 0  # a ``stepprogress.Phase``
    layer: int = 0
    layers: int = 0
    forward_done: bool = False
    stalled_s: float = 0.0  # since its step last advanced
    forward_s: float = 0.0  # since its first layer began (0.0: none yet)
    pace_s: float = 0.0
    tail: float = 1.0
    #: how long it had sat in one collective (-1.0: in none, or it keeps no mark)
    in_collective_s: float = -1.0

    def step_progress(self, age_s: float, now: float) -> StepProgress | None:
        """Its step's progress on a reader's clock: the record is ``age_s`` old at the reader's ``now``
        (None: it keeps none)."""
        if not self.layered or self.phase not in set(Phase):
            return None
        at = now - age_s  # when it was published, on the reader's clock
        return StepProgress(
            self.step, Phase(self.phase), self.layer, self.layers, at - self.ran_s,
            at - self.forward_s if self.forward_s else 0.0, at - self.stalled_s, self.pace_s,
            self.forward_done, self.tail,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> RankProgress:
        """The record a ``to_json`` wrote; ``ValueError`` if it is not one."""
        if not isinstance(data, dict):
            raise ValueError(f"not a progress record: {data!r}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                if f.default is not MISSING:  # it has a default
                    continue
                raise ValueError(f"progress record without {f.name!r}")
            values[f.name] = _typed(f.name, str(f.type), data[f.name])
        return cls(**values)

    @property
    def key(self) -> tuple[int, int]:
        return (self.node, self.rank)

    def label(self) -> str:
        """``node 1 TP1``-style, from the title's ranks when it has them, else the global rank."""
        ranks = " ".join(re.findall(r"(?:TP|PP|DP|PCP|DCP|EP)\d+", self.title))
        return f"node {self.node} {ranks or f'rank {self.rank}'}"


def _typed(name: str, kind: str, value: Any) -> Any:
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"progress record: {name}={value!r} is not true/false")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"progress record: {name}={value!r} is not text")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"progress record: {name}={value!r} is not a number")
    return int(value) if kind == "int" else float(value)


def progress_path(directory: str, node: int, rank: int) -> str:
    return os.path.join(directory, f"progress-n{node}-r{rank}.json")


def write_progress(directory: str, record: RankProgress) -> None:
    write_whole(progress_path(directory, record.node, record.rank), record.to_json())


def read_progress(path: str) -> RankProgress | None:
    """One rank's record, or None (none yet, or unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        with open(path) as f:
            return RankProgress.from_dict(json.load(f))
    return None


def read_all(directory: str) -> list[RankProgress]:
    """Every rank's latest record in ``directory``, by node and rank."""
    found = []
    for path in glob.glob(os.path.join(glob.escape(directory), "progress-n*-r*.json")):
        if _PROGRESS_NAME.match(os.path.basename(path)):
            record = read_progress(path)
            if record is not None:
                found.append(record)
    return sorted(found, key=lambda r: r.key)


def stack_request_path(directory: str, node: int, rank: int) -> str:
    return os.path.join(directory, f"stack-request-n{node}-r{rank}")


def stack_answer_path(directory: str, node: int, rank: int) -> str:
    return os.path.join(directory, f"stack-n{node}-r{rank}.txt")


def request_stack(directory: str, node: int, rank: int) -> str:
    """Ask a rank for its stack; the token its answer will carry."""
    token = uuid.uuid4().hex
    write_whole(stack_request_path(directory, node, rank), token)
    return token


def read_request(directory: str, node: int, rank: int) -> str | None:
    """The token of the latest stack request to a rank, or None."""
    with contextlib.suppress(OSError):
        with open(stack_request_path(directory, node, rank)) as f:
            return f.read().strip() or None
    return None


#: the first line of an answer: this prefix and the request's token
ANSWER_PREFIX = "stack-for "


def write_stack_answer(directory: str, node: int, rank: int, token: str, text: str) -> None:
    write_whole(stack_answer_path(directory, node, rank), f"{ANSWER_PREFIX}{token}\n{text}")


def read_stack_answer(directory: str, node: int, rank: int, token: str) -> str | None:
    """The rank's stack if it has answered the request ``token``, else None."""
    with contextlib.suppress(OSError):
        with open(stack_answer_path(directory, node, rank)) as f:
            first = f.readline()
            if first.strip() == f"{ANSWER_PREFIX}{token}":
                return f.read()
    return None
