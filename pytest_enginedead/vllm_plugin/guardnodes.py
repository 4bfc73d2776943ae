"""The guard's view of an engine's ranks on other nodes (``ENGINEDEAD_PROGRESS_DIR``).

``enginecore.EngineCorePlugin`` judges its own node's workers from ``/proc``; the ranks of the other nodes
come from the progress they publish (``process.remote``), read here: which node the engine
core's executor is, and the other nodes' latest records, newer than the engine core.
"""

from __future__ import annotations

import time
from typing import Any

from ..compat import in_core
from ..process.remote import RemoteLook, RemoteRanks


class OtherNodes:
    """The other nodes' ranks, as their published progress shows them (none on one node)."""

    def __init__(self, progress_dir: str | None) -> None:
        #: where the other nodes' ranks publish their progress (None: one node)
        self.progress_dir = progress_dir
        self.node = 0  # the engine core's node, once its executor is known
        self.born_wall = time.time()  # an older record in the directory is another engine's
        self.looks: list[RemoteLook] = []  # as the last look saw them
        self._remote: RemoteRanks | None = None

    def look(self, executor: Any, cached: bool = False) -> list[RemoteLook]:
        """The other nodes' ranks now (``cached``: as the last look saw them)."""
        if self.progress_dir and self._remote is None and executor is not None:
            self.node = in_core.executor_node(executor)
            self._remote = RemoteRanks(self.progress_dir, self.node, since_wall=self.born_wall)
        if self._remote is not None and not cached:
            self.looks = self._remote.look()
        return self.looks
