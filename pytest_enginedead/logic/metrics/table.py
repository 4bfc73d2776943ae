"""The plugin's metric families, one definition each: name, type, labels, help.

Prometheus' conventions: one prefix (``enginedead_``), base units (seconds), ``_total`` on counters,
``_seconds`` on durations, labels of low cardinality only (``phase``, ``source``, ``action``,
``verdict``, ``engine``, ``rank``, ``node``) — never a pid or a request.  The serving process's
collector, ``enginedead probe --prometheus`` and the docs' metrics table all read this table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

PREFIX = "enginedead_"


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Metric:
    """One metric family."""

    name: str  # the family's name; a counter's samples add ``_total``
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()

    @property
    def exposed(self) -> str:
        """The name as a query writes it: a counter's with ``_total``."""
        return f"{self.name}_total" if self.kind is Kind.COUNTER else self.name


RANK_LABELS = ("engine", "rank", "node")

STEP_DURATION = Metric(
    "enginedead_step_duration_seconds", Kind.HISTOGRAM,
    "Engine steps by phase (forward: execute_model, sampling: sample_tokens), timed in the engine core "
    "from the RPC sent to its reply: the time vLLM's deadline bounds. Buckets from 5 ms to 2 h.",
    ("phase",))
DEADLINE = Metric(
    "enginedead_deadline_seconds", Kind.GAUGE,
    "The deadline the step in flight dies at (or the last one did): vLLM's own (source stock), the guard's "
    "cap from its policy for the step's batch (source policy), a test's (source harness).",
    ("source",))
STOCK_DEADLINE = Metric(
    "enginedead_stock_deadline_seconds", Kind.GAUGE,
    "vLLM's own deadline, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS: without the guard the line of death, with it "
    "the point where the guard asks whether the workers compute.")
LONGEST = Metric(
    "enginedead_step_longest_seconds", Kind.GAUGE,
    "The longest step of the last 10 minutes, the one in flight included.")
RATIO = Metric(
    "enginedead_step_deadline_ratio", Kind.GAUGE,
    "enginedead_step_longest_seconds over the deadline in force: 1 is a step at its deadline (the headroom "
    "an alert watches).")
AGE = Metric(
    "enginedead_step_age_seconds", Kind.GAUGE,
    "How long the rank's step in flight has run (0 between steps).", RANK_LABELS)
BATCH = Metric(
    "enginedead_step_batch", Kind.GAUGE,
    "Sequences in the step in flight (0 between steps).", RANK_LABELS)
LAYER = Metric(
    "enginedead_step_layer", Kind.GAUGE,
    "Layers of the step in flight the rank has finished (0 between steps).", RANK_LABELS)
LAYERS = Metric(
    "enginedead_step_layers", Kind.GAUGE,
    "The model's attention layers on the rank (0: its layers are not seen).", RANK_LABELS)
REMAINING = Metric(
    "enginedead_step_remaining_seconds", Kind.GAUGE,
    "When the forward pass of the step in flight ends, at its pace so far, in seconds from now (absent "
    "while not known: before a layer finished, or between steps).", RANK_LABELS)
STALLED = Metric(
    "enginedead_step_stalled_seconds", Kind.GAUGE,
    "Since the rank's step in flight last advanced (a layer began, its forward pass ended, sampling "
    "began); 0 between steps. The guard ends a step that shows no work for its hang_s, or for four of its "
    "layers' pace where that is longer.", RANK_LABELS)
GUARD_ENABLED = Metric(
    "enginedead_guard_enabled", Kind.GAUGE, "1 when the guard runs in the engine core, else 0.")
GUARD_REQUESTED = Metric(
    "enginedead_guard_requested", Kind.GAUGE,
    "1 when ENGINEDEAD_GUARD asks for the guard; with enginedead_guard_enabled 0 it refused a bad setting "
    "(its ERROR line in vLLM's log says which).")
GUARD_HANG = Metric(
    "enginedead_guard_hang_seconds", Kind.GAUGE,
    "The guard's hang_s: how long a step may show no work before the guard ends the wait (absent without "
    "the guard).")
DECISIONS = Metric(
    "enginedead_guard_decisions", Kind.COUNTER,
    "The guard's decisions at vLLM's deadline and after it, by what it did (wait, warn, end, cap, monitor) "
    "and what it found (SLOW, HUNG, DEAD).", ("action", "verdict"))
SAVED = Metric(
    "enginedead_guard_saved_steps", Kind.COUNTER,
    "Steps that ran past vLLM's deadline and returned because the guard waited: each one a death stock vLLM "
    "would have caused.")
DEATHS = Metric(
    "enginedead_engine_deaths", Kind.COUNTER,
    "Engine deaths at a step, by the verdict on its workers: SLOW a false death (they computed), HUNG and "
    "DEAD genuine. Counted across the server's restarts while its state directory lasts.", ("verdict",))
STARTED = Metric(
    "enginedead_engine_start_time_seconds", Kind.GAUGE,
    "When the engine core started, in seconds since the epoch: a change is a restart.")
BUILD = Metric(
    "enginedead_build_info", Kind.GAUGE,
    "The plugin's version and vLLM's, as labels; always 1.", ("version", "vllm"))

PROBE_ALIVE = Metric(
    "enginedead_probe_alive", Kind.GAUGE,
    "enginedead probe's answer when it printed these figures (enginedead probe --prometheus only): 1 alive "
    "(computing, however long, or idle), 0 hung or gone.")

#: every family, in the order /metrics shows them
METRICS: tuple[Metric, ...] = (
    STEP_DURATION, DEADLINE, STOCK_DEADLINE, LONGEST, RATIO, AGE, BATCH, LAYER, LAYERS, REMAINING, STALLED,
    GUARD_ENABLED, GUARD_REQUESTED, GUARD_HANG, DECISIONS, SAVED, DEATHS, STARTED, BUILD,
)

#: what ``enginedead probe --prometheus`` adds to them
PROBE_ONLY: tuple[Metric, ...] = (PROBE_ALIVE,)
