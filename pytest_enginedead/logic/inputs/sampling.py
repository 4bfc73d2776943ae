"""How busy counts as busy and how often to look: what ``--enginedead-busy-threshold`` and
``--enginedead-sample-interval`` set (``harness.judging.liveness`` samples by it).

Apart from the sampler, which needs psutil: every pytest run of the environment resolves the
options, most of them with no engine to sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...contract.decisions import BUSY_CORES, DEFAULT_INTERVAL_S, DEFAULT_WINDOW_S


@dataclass(frozen=True)
class LivenessSettings:
    """How busy counts as busy, and how often to look (the options set them)."""

    threshold: float = BUSY_CORES
    interval_s: float = DEFAULT_INTERVAL_S
    window_s: float = DEFAULT_WINDOW_S
