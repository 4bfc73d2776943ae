"""What ``enginedead check`` runs and how it reads the outcome.

Each batch size runs twice: under vLLM's stock deadline and under the chosen
policy.  On the bundled tiny model a real step takes milliseconds, so a busy step
is injected, sized from the stock deadline: batches up to the geometric mean of
the configured sizes fit, larger ones do not.  On a user's model the real step
time decides; nothing is injected.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import compat
from .options import BUNDLED_MODEL
from .report import verdict_word

ENV_STOCK = "ENGINEDEAD_CHECK_STOCK_S"
ENV_SLOW = "ENGINEDEAD_CHECK_SLOW_S_PER_SEQ"
ENV_TOKENS = "ENGINEDEAD_CHECK_MAX_TOKENS"
ENV_PROMPT = "ENGINEDEAD_CHECK_PROMPT_LEN"

#: On the bundled model the stock deadline is time-compressed to this (vLLM's 300 s
#: would make one demo death take five minutes); a real model uses vLLM's own.
BUNDLED_STOCK_S = 2.0
MODES = ("stock", "policy")


@dataclass(frozen=True)
class CheckPlan:
    stock_s: float
    slow_s_per_seq: float
    max_tokens: int = 4
    prompt_len: int = 4

    def to_env(self) -> dict[str, str]:
        """The plan for the regression run; ``vllm-stock`` then means this stock deadline."""
        return {
            compat.DEADLINE_ENV: compat.deadline_env_value(self.stock_s),
            ENV_STOCK: repr(self.stock_s),
            ENV_SLOW: repr(self.slow_s_per_seq),
            ENV_TOKENS: str(self.max_tokens),
            ENV_PROMPT: str(self.prompt_len),
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str], model: str, batch_sizes: Sequence[int]) -> CheckPlan:
        """What the regression suite runs; unset values get ``plan_for``'s defaults."""
        default = plan_for(model, batch_sizes)
        stock = float(environ.get(ENV_STOCK, default.stock_s))
        slow = environ.get(ENV_SLOW)
        return cls(
            stock_s=stock,
            slow_s_per_seq=float(slow) if slow is not None else sized_burn(model, stock, batch_sizes),
            max_tokens=int(environ.get(ENV_TOKENS, default.max_tokens)),
            prompt_len=int(environ.get(ENV_PROMPT, default.prompt_len)),
        )


def is_bundled(model: str) -> bool:
    return os.path.realpath(model) == os.path.realpath(BUNDLED_MODEL)


def sized_burn(model: str, stock_s: float, batch_sizes: Sequence[int]) -> float:
    """Busy seconds per sequence so the stock deadline splits the batch sizes.

    The step of a batch at the geometric mean of the smallest and largest size
    takes exactly the deadline: smaller batches fit, larger ones outlive it.
    """
    if not is_bundled(model):
        return 0.0
    lo, hi = min(batch_sizes), max(batch_sizes)
    boundary = math.sqrt(lo * hi) if hi > lo else 2 * hi
    return round(stock_s / boundary, 4)


def plan_for(
    model: str, batch_sizes: Sequence[int], stock_s: float | None = None, max_tokens: int = 4
) -> CheckPlan:
    if stock_s is None:
        stock_s = BUNDLED_STOCK_S if is_bundled(model) else compat.stock_deadline_s()
    return CheckPlan(stock_s, sized_burn(model, stock_s, batch_sizes), max_tokens)


# --- reading the outcome ---------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    batch_size: int
    mode: str
    deadline_s: float
    deadline_source: str
    steps: int
    p50_s: float | None
    max_s: float | None
    verdict: str  # ok / false death / genuine death / failed / skipped
    nodeid: str
    #: the longest step had not finished: max_s is how long it had run
    max_running: bool = False


def mode_of(nodeid: str) -> str:
    for mode in MODES:
        if f"-{mode}]" in nodeid or f"[{mode}-" in nodeid or f"[{mode}]" in nodeid:
            return mode
    return "?"


def rows_from_report(report: Mapping[str, Any]) -> list[Row]:
    """One row per regression test (its call phase, or the phase that failed)."""
    by_node: dict[str, Mapping[str, Any]] = {}
    for t in report.get("tests", []):
        if t["nodeid"] not in by_node or t["when"] == "call":
            by_node[t["nodeid"]] = t
    rows = []
    for nodeid, t in by_node.items():
        word = verdict_word(t.get("verdict"))
        if t.get("verdict") is None and t["outcome"] == "failed":
            word = "failed"
        rows.append(
            Row(
                int(t["batch_size"]), mode_of(nodeid), float(t["timeout_s"]),
                str(t.get("deadline_source", "")), int(t.get("steps") or 0),
                t.get("step_p50_s"), t.get("step_max_s"), word, nodeid,
                bool(t.get("step_max_running")),
            )
        )
    return sorted(rows, key=lambda r: (r.batch_size, MODES.index(r.mode) if r.mode in MODES else 9))


def format_table(rows: Sequence[Row]) -> str:
    def secs(x: float | None, running: bool = False) -> str:
        return "-" if x is None else f"{'>=' if running else ''}{x:.3f}s"

    lines = [
        f"{'batch':>5}  {'run':<7} {'deadline':>9}  {'steps':>5}  {'step p50':>9}  {'step max':>9}  verdict",
    ]
    for r in rows:
        lines.append(
            f"{r.batch_size:>5}  {r.mode:<7} {r.deadline_s:>8g}s  {r.steps:>5}  "
            f"{secs(r.p50_s):>9}  {secs(r.max_s, r.max_running):>9}  {r.verdict}"
        )
    return "\n".join(lines)


def false_deaths_under_policy(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.mode == "policy" and r.verdict == "false death"]
