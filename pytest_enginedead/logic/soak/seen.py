"""What Prometheus saw of a soak run, held against what the soak's own evidence counted.

The soak's supervisor restarts the server as an operator's does: on the same port, with the same guard
state directory, so the server is one Prometheus ``instance`` across its starts and its counters carry
on: the next engine core folds a gone one's counters (its steps, the hung step the guard ended, its
death) into the server's totals.  What Prometheus saw is then the last value it scraped of each
counter of that instance (read through any drop to 0, as ``increase`` reads a reset, so a counter that
did not carry is summed as before), and it can only have seen what happened before that last scrape:
each count of the soak is told in all and as the range a scrape at that moment could hold, from what
happened before the scrape began to what happened before it had read the figures (``SLACK_S``
later).  A death is in the counters once the start that died has written it, and carried once the
next start's engine core is up: it is certainly seen where a later start was serving by the last
scrape (the soak waits for Prometheus to scrape its last start), and may be seen where none was (a
scrape between the death and the server's exit).  Were each start its own instance (a new port), the
same holds instance by instance, and a start that died takes the events of its last second with it.
Prometheus *agrees* where its figure lies in the range.  A restart Prometheus sees as a new instance
or as its instance coming back (``up`` 1 again after ``DOWN_SCRAPES`` failed scrapes).  The times are
unix seconds throughout (the harness turns the workers' monotonic clock into them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...contract.decisions import Decision, GuardAction

#: failed scrapes in a row before ``up`` 1 again is a restart: a vLLM server takes longer than that
#: to start, a scrape that timed out on a busy server does not stand for one
DOWN_SCRAPES = 3

#: a scrape's figures are read at most this long after the scrape's timestamp (its duration, and the
#: engine core's counter moving before the worker's record of the same step)
SLACK_S = 0.5


@dataclass(frozen=True)
class Scraped:
    """What Prometheus last scraped of one ``instance`` (a server's ``host:port``: every start of it
    when restarts keep the port); ``last_s`` None: never scraped."""

    instance: str
    last_s: float | None
    steps: int = 0  # the step histogram's count, phase forward
    decisions: Mapping[Decision, int] = field(default_factory=dict)  # each kind's count
    deaths: int = 0
    comebacks: int = 0  # ``up`` back to 1 after DOWN_SCRAPES or more failed scrapes: restarts seen


@dataclass(frozen=True)
class Counted:
    """What the soak's evidence holds of one start: when each step ended, each decision of the guard
    (its ``Decision``, when), whether the engine died (not stopped by the soak), and when the start
    was ready (answered ``/health``)."""

    instance: str
    step_ends: Sequence[float]
    decisions: Sequence[tuple[Decision, float]]
    died: bool = False
    ready_s: float = 0.0


@dataclass(frozen=True)
class Tally:
    """One figure: the soak's count in all, the range a scrape could hold, what Prometheus saw."""

    what: str
    soak: int
    least: int  # happened before the last scrape of its instance began
    most: int  # happened before that scrape could have read it
    prometheus: int

    @property
    def agree(self) -> bool:
        return self.least <= self.prometheus <= self.most

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "soak": self.soak, "by_last_scrape": [self.least, self.most],
                "prometheus": self.prometheus, "agree": self.agree}


@dataclass(frozen=True)
class Seen:
    """The comparison of one run: a tally per figure, the starts, and the starts Prometheus scraped
    (each instance's starts up to its last scrape)."""

    tallies: tuple[Tally, ...]
    starts: int
    scraped: int
    interval_s: float

    @property
    def agree(self) -> bool:
        return all(t.agree for t in self.tallies)

    def to_dict(self) -> dict[str, Any]:
        return {"agree": self.agree, "starts": self.starts, "scraped_starts": self.scraped,
                "interval_s": self.interval_s, "tallies": [t.to_dict() for t in self.tallies]}


def through_resets(values: Iterable[float]) -> int:
    """A counter's count over its samples, in order: its last value plus the value before each drop
    (a counter that began again at 0), as Prometheus' ``increase`` reads resets."""
    total, last = 0.0, 0.0
    for v in values:
        if v < last:
            total += last
        last = v
    return round(total + last)


def comebacks(ups: Iterable[float]) -> int:
    """How often ``up`` (its samples, in order) was 1 again after ``DOWN_SCRAPES`` or more 0s in a row,
    once it had been 1: the restarts Prometheus saw of one instance."""
    count, down, was_up = 0, 0, False
    for v in ups:
        if v == 1:
            count += was_up and down >= DOWN_SCRAPES
            was_up, down = True, 0
        else:
            down += 1
    return count


@dataclass(frozen=True)
class Instance:
    """An instance's starts, in order, and what Prometheus last scraped of it."""

    starts: Sequence[Counted]
    scraped: Scraped

    def within(self, times: Iterable[float]) -> tuple[int, int]:
        """How many of ``times`` its last scrape holds at least and at most."""
        last_s = self.scraped.last_s
        if last_s is None:
            return 0, 0
        times = list(times)
        return sum(1 for t in times if t <= last_s), sum(1 for t in times if t <= last_s + SLACK_S)

    def deaths(self) -> tuple[int, int, int]:
        """(deaths, seen for certain, may have been seen): a death is carried into the counters by the
        next start's engine core, up before that start was ready; without a next start serving by the
        last scrape it was seen only where a scrape came between the death and the exit."""
        last_s = self.scraped.last_s
        died = [i for i, c in enumerate(self.starts) if c.died]
        if last_s is None:
            return len(died), 0, 0
        carried = sum(1 for i in died if any(later.ready_s <= last_s for later in self.starts[i + 1:]))
        return len(died), carried, sum(1 for i in died if self.starts[i].ready_s <= last_s + SLACK_S)

    def seen_starts(self) -> int:
        last_s = self.scraped.last_s
        return 0 if last_s is None else sum(1 for c in self.starts if c.ready_s <= last_s)


def _tally(what: str, instances: Sequence[Instance], times: Callable[[Counted], list[float]],
           seen: Callable[[Scraped], int]) -> Tally:
    """Sum over the instances of ``times(counted)`` of each start (when each happened) against
    ``seen(scraped)``."""
    soak = least = most = prom = 0
    for inst in instances:
        mine = [t for c in inst.starts for t in times(c)]
        low, high = inst.within(mine)
        soak, least, most, prom = soak + len(mine), least + low, most + high, prom + seen(inst.scraped)
    return Tally(what, soak, least, most, prom)


def _decision(key: Decision, instances: Sequence[Instance]) -> Tally:
    """One kind of the guard's decisions (``guard wait SLOW``)."""
    return _tally(f"guard {key}", instances, lambda c: [t for d, t in c.decisions if d == key],
                  lambda s: s.decisions.get(key, 0))


def _decision_keys(instances: Sequence[Instance]) -> list[Decision]:
    """Every kind of decision either side counted: waits, then ends, then the rest, each by its words."""
    keys = {d for inst in instances for c in inst.starts for d, _ in c.decisions}
    keys |= {k for inst in instances for k, n in inst.scraped.decisions.items() if n}
    return sorted(keys, key=lambda k: (k.action is not GuardAction.WAIT, k.action is not GuardAction.END,
                                       str(k)))


def _deaths(instances: Sequence[Instance]) -> Tally:
    """The engine's deaths (``Instance.deaths``)."""
    soak = least = most = 0
    for inst in instances:
        died, low, high = inst.deaths()
        soak, least, most = soak + died, least + low, most + high
    return Tally("engine deaths", soak, least, most, sum(inst.scraped.deaths for inst in instances))


def _restarts(instances: Sequence[Instance]) -> Tally:
    """The supervisor's restarts: each new instance after the first, and each time one came back."""
    restarts = max(0, sum(len(inst.starts) for inst in instances) - 1)
    scraped = [inst.scraped for inst in instances if inst.scraped.last_s is not None]
    return Tally("restarts", restarts, restarts, restarts,
                 max(0, len(scraped) - 1) + sum(s.comebacks for s in scraped))


def compare(counted: Sequence[Counted], scraped: Sequence[Scraped], interval_s: float) -> Seen:
    """Prometheus' figures (``scraped``, by instance) against the soak's (``counted``, one per start, in
    order: the starts of one instance share its figures)."""
    by = {s.instance: s for s in scraped}
    grouped: dict[str, list[Counted]] = {}
    for c in counted:
        grouped.setdefault(c.instance, []).append(c)
    instances = [Instance(starts, by.get(name, Scraped(name, None))) for name, starts in grouped.items()]
    tallies = [_tally("forward steps", instances, lambda c: list(c.step_ends), lambda s: s.steps)]
    tallies += [_decision(key, instances) for key in _decision_keys(instances)]
    tallies += [_deaths(instances), _restarts(instances)]
    return Seen(tuple(tallies), len(counted), sum(inst.seen_starts() for inst in instances), interval_s)
