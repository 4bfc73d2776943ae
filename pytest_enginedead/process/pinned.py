"""A process the harness started, pinned by pid and creation time: a reused pid is never touched."""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class ProcRef:
    """A process we started: pid plus creation time, so a reused pid is never touched."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, proc: psutil.Process) -> ProcRef:
        return cls(proc.pid, proc.create_time())

    def process(self, zombie: bool = False) -> psutil.Process | None:
        """The live process (or its zombie, if asked), or None if the pid is not ours."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > 0.01:
                return None
            if not zombie and proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.Error:
            return None
