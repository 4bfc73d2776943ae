"""Files a process of the engine leaves behind when it dies: removed by the next one to start.

The guard's state (one per engine core, for ``enginedead probe``), the collective marks and the
step progress records (one each per worker) live in a directory every engine of the machine
shares; a killed process cannot remove its own.
"""

from __future__ import annotations

import contextlib
import os

from ..contract.collectives import mark_pid
from ..contract.guardfiles import guard_state_pid, read_guard_state
from ..contract.stepprogress import layers_pid
from ..process import reading


def remove_stale_states(directory: str, front: int | None = None) -> None:
    """Remove guard states whose engine core is gone (or, given ``front``, that front's), and
    collective marks whose worker is gone (a killed worker leaves its mark)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            worker = mark_pid(name) or layers_pid(name)
            if worker is not None and front is None and not reading.exists(worker):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(directory, name))
            pid = guard_state_pid(name)
            if pid is None:
                continue
            path = os.path.join(directory, name)
            if front is not None:
                state = read_guard_state(path)
                if state is None or state.front != front:
                    continue
            elif reading.exists(pid):
                continue
            with contextlib.suppress(OSError):
                os.remove(path)
