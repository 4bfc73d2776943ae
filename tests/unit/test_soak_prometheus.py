"""What Prometheus saw of a soak run, as ``bench/soak.py`` prints it (a disagreement is a target missed)
and as the benchmarks page shows it (``bench/soak_figures.py``); records written by hand."""

from __future__ import annotations

from typing import Any

from bench import soak, soak_figures

AGREE = {"what": "forward steps", "soak": 120, "by_last_scrape": [118, 119], "prometheus": 119, "agree": True}
DISAGREE = {"what": "guard end HUNG", "soak": 1, "by_last_scrape": [1, 1], "prometheus": 0, "agree": False}


def run(tallies: list[dict[str, Any]] | None) -> dict[str, Any]:
    seen = None if tallies is None else {"agree": all(t["agree"] for t in tallies), "starts": 2,
                                         "scraped_starts": 2, "interval_s": 1.0, "tallies": tallies}
    return {"name": "guarded", "prometheus": seen}


def test_a_disagreement_is_a_target_missed_and_agreement_is_not() -> None:
    assert soak.prometheus_disagrees(run([AGREE])["prometheus"]) == []
    assert soak.prometheus_disagrees(None) == []
    assert soak.prometheus_disagrees(run([AGREE, DISAGREE])["prometheus"]) == [
        "saw 0 guard end HUNG, the soak counted 1 (1 by its last scrape)"]
    assert soak.prometheus_lines([run([AGREE, DISAGREE]), run(None)]) == [
        "[guarded] Prometheus saw / the soak counted: forward steps 119/120; guard end HUNG 0/1 DISAGREE"]


def test_the_page_shows_a_row_per_figure_and_nothing_without_prometheus() -> None:
    assert soak_figures.prometheus_saw({"runs": [run(None)]}) == []
    lines = soak_figures.prometheus_saw({"runs": [run([AGREE, DISAGREE])]})
    assert "every 1 s" in lines[1]
    assert lines[-2:] == ["| guarded | forward steps | 120 | 118–119 | 119 | agree |",
                          "| guarded | guard end HUNG | 1 | 1 | 0 | **disagree** |"]
