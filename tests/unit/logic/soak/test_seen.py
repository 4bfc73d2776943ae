"""What Prometheus saw of a soak run against what the soak counted (``logic.soak.seen``): counts that
agree, counts that do not, what a start that died on a port of its own could not have shown it, and
a death carried across a restart on the same port."""

from __future__ import annotations

from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.logic.soak.seen import (
    DOWN_SCRAPES,
    SLACK_S,
    Counted,
    Decision,
    Scraped,
    Seen,
    comebacks,
    compare,
    through_resets,
)

A, B = "127.0.0.1:8001", "127.0.0.1:8002"
WAIT_SLOW, WAIT_HUNG = Decision(GuardAction.WAIT, Verdict.SLOW), Decision(GuardAction.WAIT, Verdict.HUNG)
END_HUNG, MONITOR_DEAD = Decision(GuardAction.END, Verdict.HUNG), Decision(GuardAction.MONITOR, Verdict.DEAD)


def tallies(seen: Seen) -> dict[str, tuple[int, int, int, int, bool]]:
    return {t.what: (t.soak, t.least, t.most, t.prometheus, t.agree) for t in seen.tallies}


def test_a_start_scraped_after_its_last_step_agrees_to_the_count() -> None:
    counted = [Counted(A, [1.0, 2.0, 3.0], [(WAIT_SLOW, 2.5), (WAIT_SLOW, 2.8)])]
    seen = compare(counted, [Scraped(A, 10.0, steps=3, decisions={WAIT_SLOW: 2, END_HUNG: 0})], 1.0)
    assert tallies(seen) == {"forward steps": (3, 3, 3, 3, True), "guard wait SLOW": (2, 2, 2, 2, True),
                             "engine deaths": (0, 0, 0, 0, True), "restarts": (0, 0, 0, 0, True)}
    assert seen.agree and seen.starts == seen.scraped == 1


def test_a_count_prometheus_did_not_record_disagrees() -> None:
    counted = [Counted(A, [1.0, 2.0, 3.0], [(WAIT_SLOW, 2.5)])]
    seen = compare(counted, [Scraped(A, 10.0, steps=2, decisions={WAIT_SLOW: 0, WAIT_HUNG: 1})], 1.0)
    got = tallies(seen)
    assert got["forward steps"] == (3, 3, 3, 2, False)
    assert got["guard wait SLOW"] == (1, 1, 1, 0, False)
    assert got["guard wait HUNG"] == (0, 0, 0, 1, False)
    assert not seen.agree
    assert seen.to_dict()["tallies"][0] == {"what": "forward steps", "soak": 3, "by_last_scrape": [3, 3],
                                            "prometheus": 2, "agree": False}


def test_a_start_that_died_is_held_to_what_its_last_scrape_could_hold() -> None:
    counted = [Counted(A, [1.0, 2.0, 5.0, 5.0 + SLACK_S / 2, 9.0], [(END_HUNG, 5.2)], died=True),
               Counted(B, [20.0], [])]
    scraped = [Scraped(A, 5.0, steps=4, decisions={END_HUNG: 1}), Scraped(B, 30.0, steps=1)]
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
    cap_hung = Decision(GuardAction.CAP, Verdict.HUNG)
    counted = [Counted(A, [], [(MONITOR_DEAD, 1.0), (END_HUNG, 2.0), (WAIT_SLOW, 3.0), (cap_hung, 4.0)])]
    whats = [t.what for t in compare(counted, [Scraped(A, 9.0)], 1.0).tallies]
    assert whats == ["forward steps", "guard wait SLOW", "guard end HUNG", "guard cap HUNG",
                     "guard monitor DEAD", "engine deaths", "restarts"]


def test_a_counter_is_counted_through_its_resets() -> None:
    assert through_resets([0, 2, 5, 1, 3]) == 8
    assert through_resets([4.0, 4.0]) == 4
    assert through_resets([]) == 0


def restarted_on_the_same_port() -> list[Counted]:
    """A start whose hung step the guard ended at 5.2 s (its engine died, the last steps at 5.0 and
    5.1), and the next start on the same port, ready at 30 s."""
    return [Counted(A, [1.0, 2.0, 5.0, 5.1], [(WAIT_HUNG, 4.0), (END_HUNG, 5.2)], died=True, ready_s=0.5),
            Counted(A, [31.0, 32.0], [], ready_s=30.0)]


def test_a_death_carried_across_a_restart_is_seen_at_the_last_scrape() -> None:
    # the next engine core folded the dead one's counters in: nothing began again at 0
    scraped = [Scraped(A, 40.0, steps=6, decisions={WAIT_HUNG: 1, END_HUNG: 1}, deaths=1, comebacks=1)]
    seen = compare(restarted_on_the_same_port(), scraped, 1.0)
    got = tallies(seen)
    assert got["forward steps"] == (6, 6, 6, 6, True)
    assert got["guard end HUNG"] == (1, 1, 1, 1, True)
    assert got["engine deaths"] == (1, 1, 1, 1, True)
    assert got["restarts"] == (1, 1, 1, 1, True)
    assert seen.agree and (seen.starts, seen.scraped) == (2, 2)


def test_counters_that_did_not_carry_miss_the_death_and_the_ended_hang() -> None:
    # the next start's counters began at 0 (read through the reset): the dead start's last scrape at
    # 4.5 s held 2 steps and the wait, never its last steps, the ended hang nor the death
    scraped = [Scraped(A, 40.0, steps=2 + 2, decisions={WAIT_HUNG: 1}, deaths=0, comebacks=1)]
    got = tallies(compare(restarted_on_the_same_port(), scraped, 1.0))
    assert got["forward steps"] == (6, 6, 6, 4, False)
    assert got["guard end HUNG"] == (1, 1, 1, 0, False)
    assert got["engine deaths"] == (1, 1, 1, 0, False)
    assert got["guard wait HUNG"] == (1, 1, 1, 1, True)


def test_a_death_no_next_start_carried_may_be_unseen() -> None:
    # the run ended with the start that died: no engine core folded it, a scrape may have caught it
    counted = [Counted(A, [1.0], [], ready_s=0.5), Counted(A, [31.0], [], died=True, ready_s=30.0)]
    got = tallies(compare(counted, [Scraped(A, 40.0, steps=2, comebacks=1)], 1.0))
    assert got["engine deaths"] == (1, 0, 1, 0, True)
    got = tallies(compare(counted, [Scraped(A, 40.0, steps=2, deaths=2, comebacks=1)], 1.0))
    assert got["engine deaths"] == (1, 0, 1, 2, False)


def test_a_restart_on_the_same_port_is_up_back_after_failed_scrapes() -> None:
    down = [0.0] * DOWN_SCRAPES
    assert comebacks([1, 1, *down, 1, 1, *down, 1]) == 2
    assert comebacks([0, 0, 0, 0, 1, 1]) == 0  # not up yet: the first start, not a restart
    assert comebacks([1, *down[1:], 1]) == 0  # a scrape or two that timed out on a busy server
    got = tallies(compare(restarted_on_the_same_port(), [Scraped(A, 40.0, comebacks=0)], 1.0))
    assert got["restarts"] == (1, 1, 1, 0, False)
