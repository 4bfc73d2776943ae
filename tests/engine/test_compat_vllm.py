"""What compat.py asks of the installed vLLM itself (no engine is started)."""

from __future__ import annotations

from pytest_enginedead import compat


def test_sampling_is_greedy() -> None:
    """Random sampling compiles a sampler in the first step on 0.27.1-0.31.0."""
    params = compat.sampling_params(4)
    assert params.temperature == 0.0 and params.max_tokens == 4 and params.ignore_eos
