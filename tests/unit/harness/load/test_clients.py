"""What a served engine's clients saw, counted: the completed requests beside the failed ones."""

from __future__ import annotations


def test_client_outcome_counts_completed_requests_beside_the_failed_ones() -> None:
    from collections import Counter

    from pytest_enginedead.harness.load.clients import ClientOutcome

    assert ClientOutcome(64, Counter(), 0.0).describe() == "64 requests: all completed"
    everyone = ClientOutcome(64, Counter({"HTTP 500 InternalServerError": 64}), 0.0)
    assert everyone.describe() == "64 requests: 64 failed (64 with HTTP 500 InternalServerError)"
    some = ClientOutcome(64, Counter({"HTTP 500 InternalServerError": 58, "APIConnectionError": 3}), 0.0)
    assert some.describe() == (
        "64 requests: 3 completed, 61 failed "
        "(58 with HTTP 500 InternalServerError, 3 with APIConnectionError)"
    )
