"""What Prometheus saw of a soak run against what the soak counted (``logic.soak.seen``): counts that
agree, counts that do not, and what a start that died could not have shown it."""

from __future__ import annotations

from pytest_enginedead.logic.soak.seen import SLACK_S, Counted, Scraped, Seen, compare, through_resets

A, B = "127.0.0.1:8001", "127.0.0.1:8002"


def tallies(seen: Seen) -> dict[str, tuple[int, int, int, int, bool]]:
    return {t.what: (t.soak, t.least, t.most, t.prometheus, t.agree) for t in seen.tallies}


def test_a_start_scraped_after_its_last_step_agrees_to_the_count() -> None:
    counted = [Counted(A, [1.0, 2.0, 3.0], [("wait SLOW", 2.5), ("wait SLOW", 2.8)])]
    seen = compare(counted, [Scraped(A, 10.0, steps=3, decisions={"wait SLOW": 2, "end HUNG": 0})], 1.0)
    assert tallies(seen) == {"forward steps": (3, 3, 3, 3, True), "guard wait SLOW": (2, 2, 2, 2, True),
                             "engine deaths": (0, 0, 0, 0, True), "restarts": (0, 0, 0, 0, True)}
    assert seen.agree and seen.starts == seen.scraped == 1


def test_a_count_prometheus_did_not_record_disagrees() -> None:
    counted = [Counted(A, [1.0, 2.0, 3.0], [("wait SLOW", 2.5)])]
    seen = compare(counted, [Scraped(A, 10.0, steps=2, decisions={"wait SLOW": 0, "wait HUNG": 1})], 1.0)
    got = tallies(seen)
    assert got["forward steps"] == (3, 3, 3, 2, False)
    assert got["guard wait SLOW"] == (1, 1, 1, 0, False)
    assert got["guard wait HUNG"] == (0, 0, 0, 1, False)
    assert not seen.agree
    assert seen.to_dict()["tallies"][0] == {"what": "forward steps", "soak": 3, "by_last_scrape": [3, 3],
                                            "prometheus": 2, "agree": False}


def test_a_start_that_died_is_held_to_what_its_last_scrape_could_hold() -> None:
    counted = [Counted(A, [1.0, 2.0, 5.0, 5.0 + SLACK_S / 2, 9.0], [("end HUNG", 5.2)], died=True),
               Counted(B, [20.0], [])]
    scraped = [Scraped(A, 5.0, steps=4, decisions={"end HUNG": 1}), Scraped(B, 30.0, steps=1)]
    got = tallies(compare(counted, scraped, 1.0))
    # 3 steps had ended when the scrape began, 4 before it could have read them; B's one on top
    assert got["forward steps"] == (6, 4, 5, 5, True)
    assert got["guard end HUNG"] == (1, 0, 1, 1, True)
    assert got["engine deaths"] == (1, 0, 1, 0, True)
    assert got["restarts"] == (1, 1, 1, 1, True)


def test_a_start_prometheus_never_scraped_is_a_restart_it_missed() -> None:
    counted = [Counted(A, [1.0], [], died=True), Counted(B, [20.0], [])]
    seen = compare(counted, [Scraped(B, 30.0, steps=1)], 1.0)
    got = tallies(seen)
    assert got["restarts"] == (1, 1, 1, 0, False)
    assert got["forward steps"] == (2, 1, 1, 1, True)
    assert (seen.starts, seen.scraped) == (2, 1)


def test_waits_and_ends_come_first() -> None:
    counted = [Counted(A, [], [("monitor DEAD", 1.0), ("end HUNG", 2.0), ("wait SLOW", 3.0)])]
    whats = [t.what for t in compare(counted, [Scraped(A, 9.0)], 1.0).tallies]
    assert whats == ["forward steps", "guard wait SLOW", "guard end HUNG", "guard monitor DEAD",
                     "engine deaths", "restarts"]


def test_a_counter_is_counted_through_its_resets() -> None:
    assert through_resets([0, 2, 5, 1, 3]) == 8
    assert through_resets([4.0, 4.0]) == 4
    assert through_resets([]) == 0
