"""What the plugin keeps for one pytest run, in the config's stash, and the keys to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:  # what an engine test needs is imported when one runs: a run without one stays light
    from ..harness import outputs
    from ..harness.engines.pool import EnginePool
    from ..harness.waiting import Progress
    from ..logic.inputs.sampling import LivenessSettings
    from ..logic.planning import sharding
    from ..logic.planning.engines import TestPlan
    from ..logic.reporting.report import Results
    from .handles import Handle
    from .options import Settings


#: what ``assert_no_false_death`` judges with unless told otherwise: the run's options (None: the
#: defaults)
liveness_defaults: ContextVar[LivenessSettings | None] = ContextVar("enginedead_liveness", default=None)


@contextlib.contextmanager
def run_settings(settings: LivenessSettings) -> Iterator[None]:
    """Make ``settings`` the default of ``assert_no_false_death`` while the block runs."""
    token = liveness_defaults.set(settings)
    try:
        yield
    finally:
        liveness_defaults.reset(token)


@dataclass
class Run:
    """Everything the plugin keeps for one pytest run.

    The engine pool and the results are made on first use: a run that collects no test of the
    plugin's never imports the harness (its start-up stays within pytest's own).
    """

    settings: Settings
    #: where the pool's start-up progress goes (None: nowhere)
    progress: Progress | None = None
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
    #: the collection holds a test of the plugin's (an engine, a factory, a marker, the policy
    #: fixture): the header is printed and the results are kept
    plugin_tests: bool = False
    _pool: EnginePool | None = None
    _results: Results | None = None

    @property
    def pool(self) -> EnginePool:
        """The engines of this run (made on first use)."""
        if self._pool is None:
            from ..harness.engines.pool import EnginePool

            self._pool = EnginePool(max_alive=1, progress=self.progress)
        return self._pool

    @property
    def has_pool(self) -> bool:
        return self._pool is not None

    @property
    def results(self) -> Results:
        """What the report and the summary are made of (made on first use)."""
        if self._results is None:
            from ..logic.reporting.report import Results

            self._results = Results()
        return self._results

    @property
    def has_results(self) -> bool:
        return self._results is not None



run_key = pytest.StashKey[Run]()

plan_key: pytest.StashKey[TestPlan] = pytest.StashKey()

handle_key: pytest.StashKey[Handle] = pytest.StashKey()

ENGINE_FIXTURES = ("vllm_engine", "vllm_server")

FACTORY_FIXTURES = ("vllm_engine_factory", "vllm_server_factory")

#: every fixture of the plugin's
PLUGIN_FIXTURES = frozenset((*ENGINE_FIXTURES, *FACTORY_FIXTURES, "engine_batch_size", "enginedead_policy"))


def uses_plugin(item: pytest.Item) -> bool:
    """Whether ``item`` is a test of the plugin's: it takes one of its fixtures or carries one of
    its markers (``enginedead_*``).  A run without any hears nothing of the plugin."""
    if PLUGIN_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    return any(mark.name.startswith("enginedead_") for mark in item.iter_markers())


def run_of(config: pytest.Config) -> Run:
    return config.stash[run_key]


def fail(message: str) -> NoReturn:
    """Fail the test with ``message`` alone: no traceback, no chained exception."""
    __tracebackhide__ = True
    raise pytest.fail.Exception(message, pytrace=False) from None


def settings_of(config: pytest.Config) -> Settings:
    """The resolved options of this run (for suites built on the plugin)."""
    return run_of(config).settings
