"""The control file: the deadline and faults the harness tells the code inside vLLM, per test."""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: A worker told to crash exits with this status.
CRASH_EXIT_CODE = 86


@dataclass(frozen=True)
class Injection:
    """Faults applied in the worker; steps are counted from 1, empty steps skipped."""

    #: each step burns CPU for this many seconds per sequence, spread over its layers (it advances)
    slow_s_per_seq: float = 0.0
    #: at this step the worker blocks idle forever, inside its middle layer
    hang_at_step: int | None = None
    crash_at_step: int | None = None
    #: at this step the worker spins at 100 % CPU inside its middle layer, never advancing (a livelock)
    spin_at_step: int | None = None
    #: the ranks (vLLM's global worker ranks) the faults apply to; None: every rank
    ranks: tuple[int, ...] | None = None
    #: the nodes (vLLM's ``--node-rank``) whose ranks the faults apply to; None: every node
    nodes: tuple[int, ...] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Injection:
        ranks, nodes = data.get("ranks"), data.get("nodes")
        return cls(**{**data, "ranks": None if ranks is None else tuple(ranks),
                      "nodes": None if nodes is None else tuple(nodes)})

    @property
    def active(self) -> bool:
        return bool(self.slow_s_per_seq or self.hang_at_step or self.crash_at_step or self.spin_at_step)

    def applies_to(self, rank: int, node: int = 0) -> bool:
        """Whether a worker of this rank, on this node, runs these faults."""
        return (self.ranks is None or rank in self.ranks) and (self.nodes is None or node in self.nodes)

    def describe(self) -> str:
        parts = []
        if self.slow_s_per_seq:
            parts.append(f"busy {self.slow_s_per_seq:g} s/seq")
        if self.hang_at_step:
            parts.append(f"hang at step {self.hang_at_step}")
        if self.crash_at_step:
            parts.append(f"crash at step {self.crash_at_step}")
        if self.spin_at_step:
            parts.append(f"spin at step {self.spin_at_step}")
        if parts and self.nodes is not None:
            parts.append(f"on node{'s' if len(self.nodes) != 1 else ''} {', '.join(map(str, self.nodes))}")
        if parts and self.ranks is not None:
            parts.append(f"on rank{'s' if len(self.ranks) != 1 else ''} {', '.join(map(str, self.ranks))}")
        return ", ".join(parts) or "none"


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


def write_whole(path: str, text: str) -> None:
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
    write_whole(control_path(run_dir), control.to_json())
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
