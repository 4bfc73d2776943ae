"""What a sizing run answers, as typed values: the fit, the worst step, the table, the advice.

One ``SizingAnswer`` is made from what the engines recorded (``result.sizing_answer``) and
read by three renderers: the text a person reads (``text.format_sizing``), the JSON a
script reads (``jsonout.answer_json``, the only place it becomes a dict) and the plot
(``commands/plots.py``).  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..machine import Machine
from ..timeouts.policies import STOCK_DEADLINE_S
from .advice import Advice
from .fit import Fit
from .forecast import Forecast
from .kvcache import KvCache
from .shapes import Limits, StepPlan
from .slices import Layout
from .terms import Step


@dataclass(frozen=True)
class DecodeTimes:
    """Decode steps of one batch size measured on the model itself: how many, and their times."""

    steps: int
    p50_s: float
    p99_s: float
    max_s: float


@dataclass(frozen=True)
class TableRow:
    """One row of batch x context: measured (decode steps at short context) or predicted by the model."""

    batch_size: int
    context_tokens: int
    predicted_s: float | None
    #: the row's time judged against the deadline: the slowest step measured, else the interval's top
    judged_s: float
    recommended_s: float
    forecast: bool
    measured: DecodeTimes | None = None
    interval_s: tuple[float, float] | None = None
    #: whether the server's KV cache holds that many sequences at that context (None: not asked)
    fits_kv_cache: bool | None = None

    @property
    def stock_fires(self) -> bool:
        return self.judged_s > STOCK_DEADLINE_S


@dataclass(frozen=True)
class Formed:
    """The worst step as the engine formed it: its shape, measured time and the model's prediction."""

    step: Step
    measured_s: float
    predicted_s: float


@dataclass(frozen=True)
class WorstStep:
    """The heaviest step the scheduler can form under the limits, its forecast, and what binds it."""

    plan: StepPlan
    step: Step
    predicted_s: float
    interval_s: tuple[float, float]
    forecast: bool
    binding: tuple[str, ...] = ()
    kv_cache_held_bytes: int | None = None
    kv_cache_bytes: int | None = None
    formed: Formed | None = None
    #: why it was not formed (or that it is a forecast)
    note: str | None = None

    @property
    def upper_s(self) -> float:
        return self.interval_s[1]

    @property
    def measured_s(self) -> float | None:
        return None if self.formed is None else self.formed.measured_s

    @property
    def stock_fires(self) -> bool:
        return self.upper_s > STOCK_DEADLINE_S


@dataclass(frozen=True)
class Span:
    """Contexts seen: the shortest and the longest (keys per decode or per prefill token)."""

    shortest: int | None = None
    longest: int | None = None

    @property
    def factor(self) -> float | None:
        if self.shortest is None or self.longest is None or self.shortest <= 0:
            return None
        return self.longest / self.shortest


@dataclass(frozen=True)
class ContextsSeen:
    decode: Span
    prefill: Span


@dataclass(frozen=True)
class RoundAnswer:
    """One round of ``--repeat`` fitted alone: its worst step."""

    round: int
    predicted_s: float
    interval_s: tuple[float, float]
    plan: StepPlan
    fit: Fit


@dataclass(frozen=True)
class Repeats:
    rounds: tuple[RoundAnswer, ...]

    @property
    def worst_predicted_s(self) -> list[float]:
        return [r.predicted_s for r in self.rounds]

    @property
    def spread(self) -> float:
        values = self.worst_predicted_s
        mean = sum(values) / len(values)
        return (max(values) - min(values)) / mean if mean > 0 else 0.0


@dataclass(frozen=True)
class EngineRecord:
    """One engine of the run (the model or a slice): what it needed and every step it recorded, per run."""

    label: str
    depth: int | None
    start_s: float | None
    memory_bytes: int
    kv_cache_gib: int
    recorded: Mapping[str, Sequence[tuple[Step, float]]]

    @property
    def steps(self) -> int:
        return sum(len(v) for v in self.recorded.values())


@dataclass(frozen=True)
class MoeKernel:
    """What vLLM's CPU MoE kernels say of the model's expert width, per tensor-parallel size."""

    line: str
    sizes: Mapping[int, bool]


@dataclass(frozen=True)
class SizingAnswer:
    """Everything a sizing run answers."""

    model: str
    vllm: str | None
    machine: Machine
    limits: Limits
    layout: Layout
    headroom: float
    fit: Fit
    worst: WorstStep
    advice: Advice
    #: the fit's per-layer view (a forecast's, or the model's own fit over its one layout)
    joint: Forecast | None = None
    is_forecast: bool = False
    rows: tuple[TableRow, ...] = ()
    engines: tuple[EngineRecord, ...] = ()
    contexts: ContextsSeen = field(default_factory=lambda: ContextsSeen(Span(), Span()))
    tensor_parallel: int = 1
    kv: KvCache | None = None
    repeats: Repeats | None = None
    moe_kernel: MoeKernel | None = None
    wall_s: float | None = None
    plot: str | None = None
    log: str | None = None

    @property
    def window(self) -> int | None:
        return self.layout.window if self.layout.has_sliding else None

    @property
    def tied(self) -> bool:
        """Whether the layer types' context terms were tied (the contexts measured could not tell them
        apart)."""
        return self.joint is not None and self.joint.tied

    @property
    def deadline_s(self) -> float:
        """The deadline in force the answer judges against."""
        return self.advice.deadline_s
