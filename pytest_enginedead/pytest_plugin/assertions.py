"""``assert_no_false_death``: fail a test when an engine is declared dead while busy.

Works with anything that has ``pids`` (``Watchable``).  An ``Inspectable`` engine
(``EngineHandle``) adds the worker's step record, the deadline, the policy and the
worker's stack to the evidence.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from ..harness.judging.liveness import LivenessSettings, Sampler
from ..harness.judging.verdict import (
    Inspectable,
    JudgesErrors,
    NotesDeaths,
    NotesFindings,
    Watchable,
    judge_death,
)
from ..logic import releases
from .run import liveness_defaults
from .run import run_settings as run_settings  # the run's defaults, set at configure


@contextmanager
def assert_no_false_death(
    engine: Watchable,
    *,
    errors: type[BaseException] | tuple[type[BaseException], ...] = (),
    threshold: float | None = None,
    interval_s: float | None = None,
) -> Iterator[None]:
    """Fail the test if the engine is declared dead while its worker is computing.

    ``with assert_no_false_death(engine): engine.generate()``.  vLLM's engine-death
    errors are recognised in every release; ``errors`` adds your own.  A death while
    the worker is ``SLOW`` fails the test with the evidence; a genuine death
    (``HUNG``, ``DEAD``) lets the original exception propagate unchanged.
    """
    __tracebackhide__ = True
    settings = (engine.liveness_settings if isinstance(engine, Inspectable)
                else liveness_defaults.get() or LivenessSettings())
    if threshold is not None:
        settings = replace(settings, threshold=threshold)
    if interval_s is not None:
        settings = replace(settings, interval_s=interval_s)
    sampler = Sampler(list(engine.pids), settings.interval_s, settings.window_s).start()
    started = time.monotonic()
    try:
        yield
    except BaseException as exc:
        extra = errors if isinstance(errors, tuple) else (errors,)
        if isinstance(engine, JudgesErrors):
            died = engine.is_engine_death(exc)
        else:
            died = releases.is_engine_death(exc)
        if not (died or (extra and isinstance(exc, extra))):
            raise
        finding = judge_death(engine, sampler, started, type(exc).__name__, settings)
        if isinstance(engine, NotesFindings):
            engine.note_finding(finding)
        elif isinstance(engine, NotesDeaths):  # your own engine: the verdict as the report writes it
            engine.note_death(finding.to_dict())
        if not finding.false_death:
            raise
        message = finding.message()
    else:
        return
    finally:
        sampler.stop()
    # "from None": the report shows our evidence, not vLLM's exception chain
    raise pytest.fail.Exception(message, pytrace=False) from None
