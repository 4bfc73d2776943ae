"""A server's figures at one moment, gathered from what its engine cores and workers write.

``gather`` reads, under the server's shared lock, its carried totals and every engine core record
of its key (``contract.metricsfile``); the counters are their sum (a gone engine core's count until
the next one folds it), the gauges come from the live engine cores (which ones is the caller's
to say: the serving process knows its own, the probe the ones below the port it was pointed at),
and each live core's ranks from their workers' progress records (``contract.stepprogress``).
Reading only: nothing here waits on the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...contract.metricsfile import (
    CoreMetrics,
    DeadlineSource,
    read_carried,
    read_core_metrics,
    records,
    shared,
)
from ...contract.metricstotals import Totals, total
from ...contract.stepprogress import StepProgress, read_step_progress


@dataclass(frozen=True)
class RankNow:
    """One rank's step in flight."""

    engine: int
    rank: int
    node: int
    age_s: float  # 0 between steps
    batch: int
    layer: int  # layers finished
    layers: int  # of how many (0: not seen)
    remaining_s: float | None  # when its forward pass ends at its pace (None: not known)
    stalled_s: float  # since it last advanced (0 between steps)


@dataclass(frozen=True)
class EngineNow:
    """One live engine core."""

    guard: bool
    asked: bool
    hang_s: float
    deadline_s: float
    stock_deadline_s: float
    source: DeadlineSource
    longest_s: float
    started: float
    ranks: tuple[RankNow, ...]

    @property
    def ratio(self) -> float:
        """The longest recent step over the deadline in force."""
        return self.longest_s / self.deadline_s if self.deadline_s > 0 else 0.0


@dataclass(frozen=True)
class ServerNow:
    """What a scrape shows: the server's counters, and its live engine cores."""

    totals: Totals
    engines: tuple[EngineNow, ...]
    version: str
    vllm: str


def rank_now(core: CoreMetrics, engine: int, rank: int, node: int, progress: StepProgress | None,
             now: float) -> RankNow:
    """A rank from its worker's progress; without a progress record, from the engine core's RPC in flight."""
    if progress is None:
        age = core.age_s(now)
        return RankNow(engine, rank, node, age, core.batch if age else 0, 0, 0, None, age)
    if not progress.in_step:
        return RankNow(engine, rank, node, 0.0, 0, 0, progress.layers, None, 0.0)
    ends = progress.ends_in_s(now)
    return RankNow(engine, rank, node, max(0.0, now - progress.began), core.batch, progress.finished_layers,
                   progress.layers, None if ends is None else round(ends, 3), progress.stalled_s(now))


def engine_now(core: CoreMetrics, layers_dir: str | None, now: float) -> EngineNow:
    ranks = tuple(rank_now(core, core.engine, slot.rank, slot.node,
                           read_step_progress(layers_dir, slot.pid), now) for slot in core.ranks)
    return EngineNow(core.guard, core.asked, core.hang_s, core.deadline_s, core.stock_deadline_s, core.source,
                     core.longest_s(now), core.started, ranks)


def gather(directory: str, key: str, live: Callable[[CoreMetrics], bool], layers_dir: str | None, now: float,
           version: str, vllm: str) -> ServerNow:
    """The server ``key``'s figures now: counters from every record and its carried totals, gauges from
    the records ``live`` accepts (``now``: ``time.monotonic()``)."""
    with shared(directory, key):
        carried = read_carried(directory, key)
        cores = [c for pid, path in records(directory, key)
                 if (c := read_core_metrics(path, pid)) is not None]
    engines = tuple(engine_now(c, layers_dir, now) for c in cores if live(c))
    return ServerNow(total([carried, *(c.totals for c in cores)]), engines, version, vllm)
