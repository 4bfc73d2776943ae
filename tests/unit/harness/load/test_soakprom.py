"""What ``soakprom.Watch`` makes of the series Prometheus holds (no Prometheus: its answers by hand)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pytest_enginedead.contract.decisions import Decision, GuardAction, Verdict
from pytest_enginedead.harness.load.soakprom import DECISIONS, Watch
from pytest_enginedead.harness.probing.promserver import Prometheus, Series

A = "127.0.0.1:8001"


class Held(Prometheus):
    """A Prometheus that runs nothing and answers each selector with the series ``held`` for it."""

    def __init__(self, held: Mapping[str, list[Series]]) -> None:
        super().__init__(0, Path("prometheus.log"), Path("targets.json"))
        self.held = held

    def series(self, selector: str, range_s: float) -> list[Series]:
        return self.held.get(selector, [])


def test_a_decision_this_plugin_does_not_know_is_counted_nowhere() -> None:
    def decided(samples: list[tuple[float, float]], **labels: str) -> Series:
        return {"instance": A, **labels}, samples

    prom = Held({"up": [({"instance": A}, [(1.0, 1.0), (2.0, 1.0)])],
                 DECISIONS: [decided([(1.0, 1.0), (2.0, 2.0)], action="wait", verdict="SLOW"),
                             decided([(2.0, 5.0)], action="pause", verdict="SLOW"),
                             decided([(2.0, 1.0)], action="end", verdict="STUCK"),
                             decided([(2.0, 1.0)], action="end", verdict="hung"),
                             decided([(2.0, 1.0)], verdict="HUNG")]})
    [scraped] = Watch(prom, 0.5).scraped()
    assert (scraped.instance, scraped.last_s) == (A, 2.0)
    assert scraped.decisions == {Decision(GuardAction.WAIT, Verdict.SLOW): 2}
