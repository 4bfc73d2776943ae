"""What the plugin keeps for one pytest run, in the config's stash, and the keys to it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import NoReturn

import pytest

from ..harness import outputs
from ..harness.pool import EnginePool
from ..logic.planning import sharding
from ..logic.planning.engines import TestPlan
from ..logic.reporting.report import Results
from .handles import Handle
from .options import Settings


@dataclass
class Run:
    """Everything the plugin keeps for one pytest run."""

    settings: Settings
    pool: EnginePool
    results: Results
    cpu_bind: str | None = None
    #: the JSON report's path, claimed at the start (never on an xdist worker: the controller writes it)
    report: outputs.Output | None = None
    #: undoes what configure set up for the run (the liveness defaults)
    scope: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    #: recorded durations to balance shards by, and this shard's tests
    durations: sharding.Durations | None = None
    split: sharding.Split | None = None
    #: where this run's durations go (claimed at the start), and what they are so far
    store: outputs.Output | None = None
    seconds: dict[str, float] = field(default_factory=dict)


run_key = pytest.StashKey[Run]()

plan_key = pytest.StashKey[TestPlan]()

handle_key = pytest.StashKey[Handle]()

ENGINE_FIXTURES = ("vllm_engine", "vllm_server")

FACTORY_FIXTURES = ("vllm_engine_factory", "vllm_server_factory")


def run_of(config: pytest.Config) -> Run:
    return config.stash[run_key]


def fail(message: str) -> NoReturn:
    """Fail the test with ``message`` alone: no traceback, no chained exception."""
    __tracebackhide__ = True
    raise pytest.fail.Exception(message, pytrace=False) from None


def settings_of(config: pytest.Config) -> Settings:
    """The resolved options of this run (for suites built on the plugin)."""
    return run_of(config).settings
