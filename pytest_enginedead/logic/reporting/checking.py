"""What ``enginedead check`` runs and how it reads the outcome.

Each batch size runs under vLLM's stock deadline and under the chosen policy (and,
with ``--guard``, under the stock deadline with the guard on), offline or through
the API server (``--server``).  On the bundled tiny model a real step takes
milliseconds, so a busy step is injected, sized from the stock deadline: batches up
to the geometric mean of the configured sizes fit, larger ones do not.  On a user's
model the real step time decides; nothing is injected.

The regression suite (``pytest_enginedead.regression``) reads the plan from its
environment and writes one progress event per run to a file the command follows.
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ...contract.decisions import Verdict
from ...contract.judge import STALL_FLOOR_S
from ...contract.names import CHECK_PLAN_ENV
from .. import releases
from ..inputs.modelconfig import BUNDLED_MODEL
from .rows import TestRow

#: On the bundled model the stock deadline is time-compressed to this (vLLM's 300 s
#: would make one demo death take five minutes); a real model uses vLLM's own.
BUNDLED_STOCK_S = 2

#: how far past the stall window the spin run's deadline lies (the worker's dump and the verdict's
#: look come a moment after the deadline: it must have spun past the window by then)
SPIN_MARGIN_S = 5

class CheckMode(str, enum.Enum):
    """One kind of run of ``enginedead check``: its value is the run's id in the test's name
    (``test_decode_batch[bs64-stock]``)."""

    #: vLLM's stock deadline (time-compressed on the bundled model): the bug, shown
    STOCK = "stock"
    #: the chosen policy's deadline
    POLICY = "policy"
    #: the stock deadline with the guard on (``--guard``)
    GUARD = "guard"
    #: a worker spinning in its step, under a deadline past the stall window (``--spin``): a
    #: genuine death, judged from the step's progress through its layers, never a false one
    SPIN = "spin"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of_nodeid(cls, nodeid: str) -> CheckMode | None:
        """The mode a regression test ran in, read from its parameter id; None for another test."""
        for mode in cls:
            if f"-{mode.value}]" in nodeid or f"[{mode.value}-" in nodeid or f"[{mode.value}]" in nodeid:
                return mode
        return None


MODES = tuple(CheckMode)


@dataclass(frozen=True)
class CheckPlan:
    """What the regression suite runs: the stock deadline, the injected step, the runs."""

    stock_s: int
    slow_s_per_seq: float
    max_tokens: int = 2
    prompt_len: int = 4
    guard: bool = False
    server: bool = False
    spin: bool = False

    @property
    def modes(self) -> tuple[CheckMode, ...]:
        wanted = {CheckMode.STOCK, CheckMode.POLICY} | ({CheckMode.GUARD} if self.guard else set()) | (
            {CheckMode.SPIN} if self.spin else set())
        return tuple(m for m in MODES if m in wanted)

    @property
    def spin_deadline_s(self) -> int:
        """The spin run's deadline: past the verdict's stall window, so a worker that spins for all
        of it has stopped advancing for longer than any pace allows (``contract.judge``)."""
        return int(STALL_FLOOR_S) + SPIN_MARGIN_S

    def to_env(self) -> dict[str, str]:
        """The plan for the regression run; ``vllm-stock`` then means this stock deadline."""
        return {releases.DEADLINE_ENV: str(self.stock_s), CHECK_PLAN_ENV: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls, environ: Mapping[str, str], model: str, batch_sizes: Sequence[int]) -> CheckPlan:
        """The plan ``enginedead check`` set, or the default one for this model and sizes.

        ``BadPlan`` (one line) when the variable does not hold a plan (``parse``).
        """
        raw = environ.get(CHECK_PLAN_ENV)
        return cls.parse(raw) if raw is not None else plan_for(model, batch_sizes)

    @classmethod
    def parse(cls, raw: str) -> CheckPlan:
        """The plan as ``to_env`` wrote it, checked like a public variable: a JSON object of the
        known keys, each of its type and in its range; ``BadPlan`` says what is wrong."""
        try:
            data = json.loads(raw)
        except RecursionError:
            raise BadPlan("nests too deeply for Python's JSON parser") from None
        except ValueError as exc:
            raise BadPlan(f"is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BadPlan(f"must hold a JSON object, not {type(data).__name__}")
        unknown = sorted(set(data) - set(PLAN_KEYS))
        if unknown:
            raise BadPlan(f"has unknown key(s) {', '.join(map(repr, unknown))}; "
                          f"it takes {', '.join(PLAN_KEYS)}")
        missing = [k for k in REQUIRED_PLAN_KEYS if k not in data]
        if missing:
            raise BadPlan(f"lacks {', '.join(map(repr, missing))}; it takes {', '.join(PLAN_KEYS)}")
        for key, value in data.items():
            problem = _plan_value_problem(key, value)
            if problem:
                raise BadPlan(f"{key!r}: {value!r} {problem}")
        return cls(**data)


class BadPlan(ValueError):
    """``ENGINEDEAD_CHECK_PLAN`` does not hold a plan; the message says what is wrong with it."""


#: the plan's keys, in ``CheckPlan``'s order; the first two have no default
PLAN_KEYS = ("stock_s", "slow_s_per_seq", "max_tokens", "prompt_len", "guard", "server", "spin")
REQUIRED_PLAN_KEYS = PLAN_KEYS[:2]


def _plan_value_problem(key: str, value: object) -> str | None:
    """What is wrong with one value of a plan (``PLAN_KEYS``), or None."""
    if key in ("guard", "server", "spin"):
        return None if isinstance(value, bool) else "is not true or false"
    if key == "slow_s_per_seq":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return "is not a number of seconds"
        return "must be >= 0" if value < 0 else None
    if isinstance(value, bool) or not isinstance(value, int):
        return "is not a whole number"
    if value < 1:
        return "must be at least 1"
    if key == "stock_s" and value > releases.MAX_DEADLINE_S:
        return f"must be at most {releases.MAX_DEADLINE_S} s, the longest wait vLLM can make"
    return None


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
    model: str,
    batch_sizes: Sequence[int],
    stock_s: int | None = None,
    max_tokens: int = 2,
    guard: bool = False,
    server: bool = False,
    spin: bool = False,
) -> CheckPlan:
    if stock_s is None:
        stock_s = BUNDLED_STOCK_S if is_bundled(model) else int(releases.stock_deadline_s())
    return CheckPlan(stock_s, sized_burn(model, stock_s, batch_sizes), max_tokens, guard=guard, server=server,
                     spin=spin)


class RunResult(enum.Enum):
    """What one check run came to, as its table row says it."""

    OK = "ok"
    FALSE_DEATH = "false death"
    GENUINE_DEATH = "genuine death"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Row:
    """One run in the verdict table."""

    batch_size: int
    #: None for a test of the suite that is no planned run (the table shows "?")
    mode: CheckMode | None
    deadline_s: float
    deadline_source: str
    steps: int
    p50_s: float | None
    max_s: float | None
    verdict: RunResult
    nodeid: str
    #: the longest step had not finished: max_s is how long it had run
    max_running: bool = False


def run_result(verdict: Verdict | None, outcome: str) -> RunResult:
    """A run's result for the table, from its last death's verdict and pytest's outcome; a
    failure with no verdict is ``FAILED``."""
    if verdict is None:
        return RunResult.FAILED if outcome == "failed" else RunResult.OK
    return RunResult.FALSE_DEATH if verdict.false_death else RunResult.GENUINE_DEATH


def report_rows(report: Mapping[str, Any]) -> list[TestRow]:
    """The report's test rows (``TestRow.from_dict``): one per regression test, its call phase or
    the phase that failed."""
    by_node: dict[str, TestRow] = {}
    for row in (TestRow.from_dict(t) for t in report.get("tests", [])):
        if row.nodeid not in by_node or row.when == "call":
            by_node[row.nodeid] = row
    return list(by_node.values())


def rows_from_report(report: Mapping[str, Any]) -> list[Row]:
    """The verdict table's rows, smaller batches first, each batch's runs in plan order."""
    rows = [
        Row(t.batch_size, CheckMode.of_nodeid(t.nodeid), t.deadline_s, t.deadline_source, t.steps,
            t.step_p50_s, t.step_max_s, run_result(t.verdict, t.outcome), t.nodeid, t.step_max_running)
        for t in report_rows(report)
    ]
    return sorted(rows, key=lambda r: (r.batch_size, MODES.index(r.mode) if r.mode is not None else 9))


def _secs(x: float | None, running: bool = False) -> str:
    return "-" if x is None else f"{'>=' if running else ''}{x:.3f}s"


def format_table(rows: Sequence[Row]) -> str:
    lines = [
        f"{'batch':>5}  {'run':<7} {'deadline':>9}  {'steps':>5}  {'step p50':>9}  {'step max':>9}  verdict",
    ]
    for r in rows:
        lines.append(
            f"{r.batch_size:>5}  {r.mode or '?':<7} {r.deadline_s:>8g}s  {r.steps:>5}  "
            f"{_secs(r.p50_s):>9}  {_secs(r.max_s, r.max_running):>9}  {r.verdict}"
        )
    return "\n".join(lines)


def slow_paths_of(report: Mapping[str, Any]) -> list[str]:
    """The slow paths the runs' verdicts named (each once, the sample counts dropped)."""
    found: dict[str, None] = {}
    for test in report.get("tests", []):
        for death in TestRow.from_dict(test).deaths:
            for line in death.slow_paths:
                found.setdefault(line.split(" [", 1)[0], None)
    return list(found)


def run_label(mode: CheckMode, plan: CheckPlan, policy: str) -> str:
    """What each run is called in the verdict line."""
    if mode is CheckMode.STOCK:
        return f"stock vLLM ({plan.stock_s} s deadline)"
    if mode is CheckMode.GUARD:
        return f"guard ({plan.stock_s} s deadline, policy {policy} as its cap)"
    if mode is CheckMode.SPIN:
        return f"spinning worker ({plan.spin_deadline_s} s deadline)"
    return f"policy {policy}"


def _judged(rows: Sequence[Row], verdict: RunResult) -> list[int]:
    """The batch sizes of the runs judged ``verdict``."""
    return [r.batch_size for r in rows if r.verdict is verdict]


def _batches(sizes: Sequence[int]) -> str:
    return ", ".join(map(str, sizes))


def mode_verdict(mine: Sequence[Row], mode: CheckMode, batch_sizes: Sequence[int]) -> tuple[list[str], int]:
    """What one mode's runs say (false deaths, failures, holes) and the exit status they alone give.

    A stock run's false death is vLLM's bug, expected: it says so and gives 0.  A spin run that
    did not die counts as failed: a genuine death is its answer.
    """
    dead = _judged(mine, RunResult.FALSE_DEATH)
    failed = _judged(mine, RunResult.FAILED)
    if mode is CheckMode.SPIN:
        failed += _judged(mine, RunResult.OK)
    ran = {r.batch_size for r in mine}
    missing = [n for n in batch_sizes if n not in ran]
    said = []
    if dead:
        said.append(f"FALSE DEATH at batch {_batches(dead)}")
    if failed:
        said.append(f"FAILED at batch {_batches(failed)} (see the log)")
    if missing:
        said.append(f"did not run at batch {_batches(missing)} (see the log)")
    code = 1 if failed or missing or (dead and mode is not CheckMode.STOCK) else 0
    return said, code


def verdict_line(
    rows: Sequence[Row], plan: CheckPlan, policy: str, batch_sizes: Sequence[int]
) -> tuple[str, int]:
    """The check's last line, naming each run, and its exit status.

    The stock runs show vLLM's behaviour: their false deaths are the bug, expected, and do
    not fail the check.  Exit 1 for a false death under the policy or the guard, for a spin run
    judged a false death or that did not die (its worker's layers are not seen), or for a planned
    run that failed or did not run (a table with a hole in it is no answer); else 0.
    """
    parts = []
    code = 0
    for mode in plan.modes:
        said, mode_code = mode_verdict([r for r in rows if r.mode == mode], mode, batch_sizes)
        code = code or mode_code
        fine = "judged hung, a genuine death" if mode is CheckMode.SPIN else "no false death"
        parts.append(f"{run_label(mode, plan, policy)}: {'; '.join(said) or fine}")
    return "; ".join(parts), code
