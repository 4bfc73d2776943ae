"""What Prometheus saw of a soak run, held against what the soak's own evidence counted.

Each start of the server (the supervisor's restart is a new server on a new port) is one Prometheus
``instance``, whose counters begin at 0; what Prometheus saw of a start is the last value it scraped
of each counter, and the run's figure is their sum over the starts.  Prometheus can only have seen
what happened before its last scrape of a start: a start that died takes the steps and decisions of
its last second with it.  So each count of the soak is told in all and as a range of what a scrape
at that moment could hold — what happened before the scrape began, up to what happened before it
had read the figures (``SLACK_S`` later) — and Prometheus *agrees* where its figure lies in that
range.  The times are unix seconds throughout (the harness turns the workers' monotonic clock into
them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: a scrape's figures are read at most this long after the scrape's timestamp (its duration, and the
#: engine core's counter moving before the worker's record of the same step)
SLACK_S = 0.5


@dataclass(frozen=True)
class Scraped:
    """What Prometheus last scraped of one start (``instance``); ``last_s`` None: never scraped."""

    instance: str
    last_s: float | None
    steps: int = 0  # the step histogram's count, phase forward
    decisions: Mapping[str, int] = field(default_factory=dict)  # "action verdict" -> count
    deaths: int = 0


@dataclass(frozen=True)
class Counted:
    """What the soak's evidence holds of one start: when each step ended, each decision of the guard
    (``"action verdict"``, when), and whether the engine died (not stopped by the soak)."""

    instance: str
    step_ends: Sequence[float]
    decisions: Sequence[tuple[str, float]]
    died: bool = False


@dataclass(frozen=True)
class Tally:
    """One figure: the soak's count in all, the range a scrape could hold, what Prometheus saw."""

    what: str
    soak: int
    least: int  # happened before the last scrape of its start began
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
    """The comparison of one run: a tally per figure, and the starts Prometheus scraped."""

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


def _within(times: Iterable[float], last_s: float | None) -> tuple[int, int]:
    """How many of ``times`` a scrape at ``last_s`` holds at least and at most."""
    if last_s is None:
        return 0, 0
    times = list(times)
    return sum(1 for t in times if t <= last_s), sum(1 for t in times if t <= last_s + SLACK_S)


Pairs = Sequence[tuple[Counted, Scraped]]


def through_resets(values: Iterable[float]) -> int:
    """A counter's count over its samples, in order: its last value plus the value before each drop
    (a counter that began again at 0), as Prometheus' ``increase`` reads resets."""
    total, last = 0.0, 0.0
    for v in values:
        if v < last:
            total += last
        last = v
    return round(total + last)


def _tally(what: str, pairs: Pairs, times: Callable[[Counted], list[float]],
           seen: Callable[[Scraped], int]) -> Tally:
    """Sum over the starts of ``times(counted)`` (when each happened) against ``seen(scraped)``."""
    soak = least = most = prom = 0
    for c, s in pairs:
        mine = times(c)
        low, high = _within(mine, s.last_s)
        soak, least, most, prom = soak + len(mine), least + low, most + high, prom + seen(s)
    return Tally(what, soak, least, most, prom)


def _decision(key: str, pairs: Pairs) -> Tally:
    """One kind of the guard's decisions (``"wait SLOW"``)."""
    return _tally(f"guard {key}", pairs, lambda c: [t for d, t in c.decisions if d == key],
                  lambda s: s.decisions.get(key, 0))


def _decision_keys(pairs: Pairs) -> list[str]:
    """Every decision either side counted, waits and ends first."""
    keys = {d for c, _ in pairs for d, _ in c.decisions}
    keys |= {k for _, s in pairs for k, n in s.decisions.items() if n}
    return sorted(keys, key=lambda k: (not k.startswith("wait"), not k.startswith("end"), k))


def _deaths(pairs: Pairs) -> Tally:
    """The engine's deaths: a start that died may have been scraped between its death and its exit, or
    not (its death is at least never seen before its last scrape, at most seen once)."""
    died = sum(1 for c, _ in pairs if c.died)
    return Tally("engine deaths", died, 0, died, sum(s.deaths for _, s in pairs))


def compare(counted: Sequence[Counted], scraped: Sequence[Scraped], interval_s: float) -> Seen:
    """Prometheus' figures (``scraped``, by instance) against the soak's (``counted``, one per start)."""
    by = {s.instance: s for s in scraped}
    pairs = [(c, by.get(c.instance, Scraped(c.instance, None))) for c in counted]
    tallies = [_tally("forward steps", pairs, lambda c: list(c.step_ends), lambda s: s.steps)]
    tallies += [_decision(key, pairs) for key in _decision_keys(pairs)]
    tallies.append(_deaths(pairs))
    seen_starts = sum(1 for _, s in pairs if s.last_s is not None)
    restarts = max(0, len(pairs) - 1)
    tallies.append(Tally("restarts", restarts, restarts, restarts, max(0, seen_starts - 1)))
    return Seen(tuple(tallies), len(pairs), seen_starts, interval_s)
