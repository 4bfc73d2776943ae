"""The soak's Prometheus: pointed at each start of the server, asked at the end what it recorded.

``Watch`` follows the supervisor (its restarts keep the server's port: one ``instance``, whose
counters carry across them), waits at the run's end until Prometheus has scraped the last start's
figures as they stand (by then the next engine core has folded every gone one's counters in), and
then reads every sample it holds of ``up``, the step histogram's count, the guard's decisions and the
deaths; ``logic.soak.seen`` holds them against the soak's own evidence of each start.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from ...contract.decisions import Decision, GuardAction, Verdict
from ...contract.steps import StepTime
from ...logic.soak.seen import Counted, Scraped, Seen, comebacks, compare, through_resets
from ..probing.promserver import Prometheus, Series
from ..waiting import wait_until
from .supervisor import Incarnation

STEPS = 'enginedead_step_duration_seconds_count{phase="forward"}'
DECISIONS = "enginedead_guard_decisions_total"
DEATHS = "enginedead_engine_deaths_total"

K = TypeVar("K")


def target(base_url: str) -> str:
    """``host:port`` of a server's base URL (``http://127.0.0.1:8000/v1``)."""
    return urllib.parse.urlsplit(base_url).netloc


class Watch:
    """Prometheus over one soak run (``Soak.prom``)."""

    def __init__(self, prom: Prometheus, interval_s: float) -> None:
        self.prom = prom
        self.interval_s = interval_s
        self.began = time.time()

    def point(self, base_url: str) -> None:
        self.prom.point(target(base_url))

    def last_scrape(self, instance: str) -> float | None:
        """When Prometheus last scraped ``instance`` and had an answer (unix seconds)."""
        found = self.prom.series(f'up{{instance="{instance}"}}', time.time() - self.began + 5)
        answered = [t for _, samples in found for t, v in samples if v == 1]
        return max(answered, default=None)

    def settle(self, base_url: str, limit_s: float = 15.0) -> bool:
        """Wait until Prometheus has scraped the server twice since now (its figures as they stand once
        the traffic is over); whether it did within ``limit_s``."""
        since = time.time() + self.interval_s
        instance = target(base_url)
        return wait_until(lambda: (self.last_scrape(instance) or 0.0) >= since, limit_s, every_s=0.25)

    def scraped(self) -> list[Scraped]:
        """What Prometheus holds of each instance it scraped in this run."""
        range_s = time.time() - self.began + 5
        ups: dict[str, tuple[float, int]] = {}
        for labels, samples in self.prom.series("up", range_s):
            answered = [t for t, v in samples if v == 1]
            if answered:
                ups[labels.get("instance", "")] = (max(answered), comebacks(v for _, v in samples))
        steps = _per_instance(self.prom.series(STEPS, range_s), lambda labels: "")
        decisions = _per_instance(self.prom.series(DECISIONS, range_s), _decision)
        deaths = _per_instance(self.prom.series(DEATHS, range_s), lambda labels: "")
        return [Scraped(i, t, sum(steps.get(i, {}).values()), dict(decisions.get(i, {})),
                        sum(deaths.get(i, {}).values()), back) for i, (t, back) in ups.items()]


def _decision(labels: Mapping[str, str]) -> Decision | None:
    """The kind of decision a series of ``DECISIONS`` counts, from its ``action`` and ``verdict`` labels
    (the action's value and the verdict's name, as ``logic.metrics.families`` exports them).  None where
    either is missing or names none this plugin knows (a server running another version of it): that
    series is left out, counted nowhere, as the soak's own evidence skips a guard event it cannot read
    (``read_guard_events``), so neither side could hold such a decision to match."""
    try:
        return Decision(GuardAction.parse(labels.get("action")), Verdict.parse(labels.get("verdict")))
    except ValueError:
        return None


def _per_instance(found: list[Series],
                  key: Callable[[Mapping[str, str]], K | None]) -> dict[str, dict[K, int]]:
    """Each counter's count by instance and ``key(labels)``, summed over the series that share them; a
    series whose key is None is left out."""
    out: dict[str, dict[K, int]] = {}
    for labels, samples in found:
        k = key(labels)
        if k is None:
            continue
        row = out.setdefault(labels.get("instance", ""), {})
        row[k] = row.get(k, 0) + through_resets(v for _, v in samples)
    return out


def counted(incarnations: Sequence[Incarnation], wall: float) -> list[Counted]:
    """The soak's evidence of each start, in order, its times turned into unix
    seconds by ``wall`` (``time.time() - time.monotonic()``)."""
    out = []
    for inc in incarnations:
        server = inc.server
        steps: list[StepTime] = server.evidence.steps()
        ends = _step_ends(steps, wall)
        decisions = [(Decision(e.action, e.verdict), e.t + wall) for e in server.evidence.guard_events()]
        died = inc.exit is not None and not inc.exit.by_us
        out.append(Counted(target(server.base_url), ends, decisions, died, inc.ready_at + wall))
    return out


def _step_ends(steps: list[StepTime], wall: float) -> list[float]:
    """When each finished step ended, as one worker recorded them (with several ranks: the one with
    the most, as the soak counts steps)."""
    per_pid: dict[int, list[float]] = {}
    for s in steps:
        if s.seconds is not None:
            per_pid.setdefault(s.pid, []).append(s.started + s.seconds + wall)
    return max(per_pid.values(), key=len, default=[])


def seen(watch: Watch, incarnations: Sequence[Incarnation], wall: float) -> Seen:
    """The run's comparison: Prometheus' figures against the soak's."""
    return compare(counted(incarnations, wall), watch.scraped(), watch.interval_s)
