"""Which engine each test needs, which tests share one, in what order, on what budget.

Pure: no pytest, no vLLM, no processes.  The plugin reads markers and options into
a ``Need`` per test; ``plan`` turns the needs of a whole collection into engine
specs, a run order and the number of distinct configurations.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...contract.control import Injection
from .. import releases

#: The context length harness engines and servers start with, unless ``max_model_len`` is given.
DEFAULT_MAX_MODEL_LEN = 512


@dataclass(frozen=True)
class GuardSpec:
    """The guard as an engine starts with it (``ENGINEDEAD_GUARD_*`` in its environment)."""

    hang_s: float
    #: ``reference``, ``vllm-stock`` or ``module:attr``: gives the guard's hard cap
    policy: str = "reference"
    #: who asked for it, for messages ("the enginedead_guard marker"); not part of the key
    source: str = field(default="", compare=False)

    def describe(self) -> str:
        return f"guard (policy {self.policy}, hang_s {self.hang_s:g} s)"


@dataclass(frozen=True)
class EngineSpec:
    """What vLLM fixes when an engine starts.  Equal specs share one engine.

    The deadline and the faults are not part of it: they are instructions the code
    inside vLLM reads per RPC (``Instructions``), so they change between tests.
    """

    model: str
    max_num_seqs: int
    extra_args: tuple[tuple[str, Any], ...] = ()
    #: cores this engine may use (VLLM_CPU_OMP_THREADS_BIND), None = vLLM decides
    cpu_bind: str | None = None
    guard: GuardSpec | None = None
    #: vLLM's OpenAI-compatible API server instead of an offline ``vllm.LLM``
    server: bool = False
    #: GiB of KV cache (VLLM_CPU_KVCACHE_SPACE), None = the user's, else what the engine's
    #: sequences can fill, at most 1 GiB (``EngineBase.kv_cache``)
    kv_cache_gib: int | None = None
    #: vLLM's ``tensor_parallel_size`` and ``pipeline_parallel_size``: one worker process per rank
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    #: the nodes the ranks are spread over (vLLM's ``--nnodes``): the head and N-1 headless
    #: nodes, each its own process tree (on one machine, each in a PID namespace of its own)
    nodes: int = 1

    @property
    def ranks(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def ranks_per_node(self) -> int:
        return self.ranks // max(1, self.nodes)

    def rank_args(self) -> dict[str, int]:
        """The ranks as vLLM's engine arguments (none for a single rank)."""
        args = {}
        if self.tensor_parallel > 1:
            args["tensor_parallel_size"] = self.tensor_parallel
        if self.pipeline_parallel > 1:
            args["pipeline_parallel_size"] = self.pipeline_parallel
        return args

    @property
    def max_model_len(self) -> int | None:
        """The context length vLLM gets (``max_model_len``, else the harness's), None if unreadable."""
        value = dict(self.extra_args).get("max_model_len", DEFAULT_MAX_MODEL_LEN)
        try:
            return int(value)
        except (TypeError, ValueError):
            return None  # vLLM itself will say what is wrong with it

    def label(self) -> str:
        parts = [f"bs{self.max_num_seqs}", f"model {os.path.basename(self.model.rstrip('/'))}"]
        if self.server:
            parts.insert(0, "server")
        if self.tensor_parallel > 1:
            parts.insert(1 if self.server else 0, f"tp{self.tensor_parallel}")
        if self.pipeline_parallel > 1:
            parts.insert(1 if self.server else 0, f"pp{self.pipeline_parallel}")
        if self.nodes > 1:
            parts.insert(1 if self.server else 0, f"n{self.nodes}")
        if self.guard is not None:
            parts.append(self.guard.describe())
        if self.extra_args:
            parts.append(", ".join(f"{k}={v!r}" for k, v in self.extra_args))
        return ", ".join(parts)


@dataclass(frozen=True)
class Instructions:
    """What one test tells the code inside vLLM: its deadline and its faults."""

    deadline_s: float
    #: what set the deadline, for messages: "policy reference", "the enginedead_timeout marker"
    deadline_source: str = "policy"
    injection: Injection = Injection()
    #: the deadline is the active policy's (not a marker's or a factory's fixed one)
    from_policy: bool = True

    @property
    def deadline_env(self) -> str:
        """The deadline as vLLM reads it: whole seconds, at least 1."""
        return releases.deadline_env_value(self.deadline_s)

    @property
    def deadline_whole_s(self) -> float:
        return float(self.deadline_env)

    @property
    def fatal(self) -> bool:
        """Whether these faults end the engine (a crash, or a hang or a spin the deadline ends)."""
        inj = self.injection
        return bool(inj.crash_at_step or inj.hang_at_step or inj.spin_at_step)

    def describe(self) -> str:
        text = f"deadline {self.deadline_env} s"
        if self.injection.active:
            text += f", {self.injection.describe()}"
        return text


@dataclass(frozen=True)
class Need:
    """What one test asks of its engine, before engines are shared out."""

    batch_size: int
    instructions: Instructions
    guard: GuardSpec | None = None
    server: bool = False
    tensor_parallel: int = 1
    nodes: int = 1


def spec_for(need: Need, model: str, cpu_bind: str | None = None) -> EngineSpec:
    """The engine one need asks for, before sharing."""
    return EngineSpec(
        model=model, max_num_seqs=need.batch_size, cpu_bind=cpu_bind, guard=need.guard,
        server=need.server, tensor_parallel=need.tensor_parallel, nodes=need.nodes,
    )


def share(specs: Sequence[EngineSpec]) -> list[EngineSpec]:
    """One engine per distinct configuration, sized for the largest batch that uses it.

    Specs that differ only in batch size get one engine sized for the larger batch (a
    test runs its own batch on it).  Returns the engine spec for each input, in order.
    """
    largest: dict[EngineSpec, int] = {}
    for spec in specs:
        key = replace(spec, max_num_seqs=0)
        largest[key] = max(largest.get(key, 0), spec.max_num_seqs)
    return [replace(s, max_num_seqs=largest[replace(s, max_num_seqs=0)]) for s in specs]


@dataclass(frozen=True)
class TestPlan:
    """The engine one test will get and what it tells it, or why it cannot get one."""

    __test__ = False  # not a pytest test class

    batch_size: int
    spec: EngineSpec | None
    instructions: Instructions | None = None
    error: str | None = None


def order(tests: Sequence[TestPlan | None]) -> list[int]:
    """Indices in run order: non-engine tests first, then each engine's tests together.

    Within one engine the tests least likely to end it run first, so that one engine
    serves as many as it can: faults that end the engine last, then by batch size,
    then the longest deadline first (a large batch under a short deadline may die).
    """
    first_seen: dict[EngineSpec, int] = {}
    for i, t in enumerate(tests):
        if t is not None and t.spec is not None:
            first_seen.setdefault(t.spec, i)

    def key(i: int) -> tuple[int, int, int, int, float, int]:
        t = tests[i]
        if t is None or t.spec is None or t.instructions is None:
            return (0, i, 0, 0, 0.0, i)
        ins = t.instructions
        return (1, first_seen[t.spec], int(ins.fatal), t.batch_size, -ins.deadline_whole_s, i)

    return sorted(range(len(tests)), key=key)


def budget_s(
    instructions: Instructions, guard_cap_s: float | None = None, start_allowance_s: float = 180.0
) -> float:
    """A pytest-timeout budget for a test: engine start-up plus two of its longest waits.

    With the guard on, a busy step may run up to the guard's cap, not just the deadline.
    """
    longest = max(instructions.deadline_whole_s, guard_cap_s or 0.0)
    # the longest timer pytest-timeout can set is the longest wait Python can make
    return min(math.ceil(start_allowance_s + 2 * longest + 60), releases.MAX_DEADLINE_S)


@dataclass(frozen=True)
class Plan:
    """A collection's plan: per test (None: no engine), run order, distinct engines."""

    tests: list[TestPlan | None]
    order: list[int]
    configurations: int

    @property
    def engine_specs(self) -> list[EngineSpec]:
        return [t.spec for t in self.tests if t is not None and t.spec is not None]


def plan(needs: Sequence[Need | str | None], model: str, cpu_bind: str | None = None) -> Plan:
    """Share engines between the needs of a collection and order the tests.

    ``needs[i]`` is test i's need, None for a test without an engine, or the
    message of why its need could not be read (a bad marker, a failing policy).
    """
    shared = iter(share([spec_for(n, model, cpu_bind) for n in needs if isinstance(n, Need)]))
    tests: list[TestPlan | None] = []
    for need in needs:
        if need is None:
            tests.append(None)
        elif isinstance(need, str):
            tests.append(TestPlan(0, None, None, need))
        else:
            tests.append(TestPlan(need.batch_size, next(shared), need.instructions))
    configurations = len({t.spec for t in tests if t is not None and t.spec is not None})
    return Plan(tests, order(tests), configurations)
