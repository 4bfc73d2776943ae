"""The engine core's figures for Prometheus (``contract.metricsfile``): each step RPC timed against the
deadline in force, the guard's decisions counted, a death at a step counted by its verdict.

Runs in ``VLLM::EngineCore`` when ``ENGINEDEAD_METRICS`` (or the guard) asks for it.  Per step RPC it
costs a few writes into a mapped record, no system call; the serving process reads that record at
each scrape (``scrape.py``), so a scrape never waits on the engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..compat import in_core
from ..contract.decisions import GuardAction, Verdict
from ..contract.metricsfile import CoreMetricsWriter, DeadlineSource, RankSlot, fold_dead, metrics_dir
from ..contract.metricstotals import StepPhase
from ..contract.names import METRICS_KEY_ENV
from ..logic import releases
from ..logic.inputs.guardconfig import GuardConfig
from ..process import reading
from .ranks import RankLooks

if TYPE_CHECKING:
    from .enginecore import EngineCorePlugin
    from .watch import StepWatch

logger = logging.getLogger("vllm.enginedead")

#: without the guard, a death at vLLM's deadline is judged from two looks this far apart
DEATH_LOOK_S = 0.25


def metrics_key(environ: Mapping[str, str], front: int) -> str:
    """Which server's figures this engine core keeps: the one its serving process named, else its own
    (``f<front pid>``: an engine outside an API server, whose figures no restart carries)."""
    return environ.get(METRICS_KEY_ENV, "").strip() or f"f{front}"


class StepMetrics:
    """The engine core's record and what it writes into it."""

    def __init__(self, writer: CoreMetricsWriter) -> None:
        self.writer = writer
        self._ranks_written = False

    @classmethod
    def start(cls, environ: Mapping[str, str], guard: GuardConfig | None, asked: bool,
              front: int) -> StepMetrics | None:
        """The record of this engine core, once the counters of its server's gone engine cores are folded
        into the server's carried totals; None (and one ERROR line) where it cannot be written."""
        directory, key = metrics_dir(environ), metrics_key(environ, front)
        try:
            stock = releases.stock_deadline_s(environ)
        except ValueError:
            stock = releases.STOCK_DEADLINE_S
        try:
            fold_dead(directory, key, reading.pid_alive)
            writer = CoreMetricsWriter(directory, key, front, guard is not None, asked,
                                       guard.hang_s if guard else 0.0, stock)
        except OSError as exc:
            logger.error("enginedead metrics: cannot write the engine's figures in %s (%s); /metrics goes "
                         "without them", directory, exc)
            return None
        return cls(writer)

    def begin(self, core: EngineCorePlugin, rpc: StepRpc) -> None:
        if not self._ranks_written and core.workers():
            self._ranks_written = True
            node = in_core.executor_node(core.executor)
            self.writer.set_ranks(in_core.executor_engine(core.executor),
                                  [RankSlot(rank, pid, node) for rank, pid in core.workers()])
        self.writer.step_begins(rpc.phase, rpc.step, rpc.batch, rpc.line_s, rpc.deadline_s, rpc.source,
                                rpc.sent)

    def decision(self, action: GuardAction, verdict: Verdict) -> None:
        self.writer.decision(action, verdict)


class StepRpc:
    """One step RPC in flight: the guard's watch on it (with the guard on) and its figures (with them on)."""

    def __init__(self, core: EngineCorePlugin, method: str, deadline_s: float, line_s: float,
                 source: DeadlineSource, watch: StepWatch | None) -> None:
        self.core = core
        self.watch = watch
        self.phase = StepPhase.of_method(method)
        self.step, self.batch = core.steps, core.batch
        self.deadline_s = deadline_s  # vLLM's (or the harness's): the guard's point of suspicion
        self.line_s, self.source = line_s, source  # what the step dies at, and where that came from
        self.sent = watch.sent if watch is not None else time.monotonic()
        if core.metrics is not None:
            core.metrics.begin(core, self)

    def done(self, exc: BaseException | None) -> None:
        """Its reply came (``exc`` None), or its wait raised ``exc``."""
        if self.watch is not None:
            self.watch.finish()
        metrics = self.core.metrics
        if metrics is None:
            return
        now = time.monotonic()
        if exc is None:
            seconds = now - self.sent
            saved = self.watch is not None and seconds > self.deadline_s
            metrics.writer.step_ends(self.phase, seconds, now, saved)
        else:
            metrics.writer.step_failed(self.death(exc))

    def death(self, exc: BaseException) -> Verdict | None:
        """The verdict on the workers of a step whose wait raised: the engine dies of it.  None where it
        is not a death at the step's deadline (vLLM's own error, a shutdown): not counted."""
        if not isinstance(exc, Exception):
            return None
        if any(not reading.pid_alive(pid) for _, pid in in_core.executor_workers(self.core.executor)):
            return Verdict.DEAD
        if self.watch is not None and self.watch.ended is not None:
            return self.watch.ended
        if not isinstance(exc, TimeoutError):
            return None
        looks = RankLooks()  # vLLM's deadline, no guard: what the workers were doing, from two looks
        looks.take(self.core, time.monotonic(), None)
        time.sleep(DEATH_LOOK_S)
        return looks.take(self.core, time.monotonic(), None)

