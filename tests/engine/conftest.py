"""Tests that need vLLM (most start real engines, ~15-45 s each): skipped without it.

``step_cost(model, batch_sizes)`` measures a model's decode steps on this machine once per
session and set of cores with ``enginedead calibrate`` (one engine; shared between xdist
workers that run on the same cores through a file under the session's temporary root) for
the tests that size a death from it (``tests/support/machine.py``); ``step_cost.calibration(...)`` is that
command's JSON, which the calibrate test checks instead of starting the same engine again.
Tests that measure the same model share an ``xdist_group``, so that one worker measures it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_enginedead.compat import versions
from tests.support.machine import FlatSteps, StepCost

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = versions.vllm_missing_reason()
    if reason is None:
        return
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.skip(reason=reason))


#: the most one measurement may take; it is a fixture of a test with pytest-timeout's 900 s
MEASURE_BUDGET_S = 600


class StepCosts:
    """``step_cost(model, batch_sizes, steps=6)``: this machine's decode step on ``model``, fitted."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, model: Path, batch_sizes: Sequence[int], steps: int = 6) -> StepCost:
        with self._measured(model, batch_sizes, steps) as (cache, flat):
            if flat.exists():  # measured twice already by another test of the session
                pytest.skip(flat.read_text())
            try:
                return StepCost.fit(str(model), json.loads(cache.read_text())["results"])
            except FlatSteps as first:
                # a busy neighbour (the other xdist worker) can drown a fast box's per-sequence
                # cost in one measurement: measure once more, then say why the test cannot size
                cache.write_text(json.dumps(_calibrate(model, batch_sizes, steps, cache)))
                try:
                    return StepCost.fit(str(model), json.loads(cache.read_text())["results"])
                except FlatSteps as again:
                    flat.write_text(f"this machine cannot size the test: {first}; measured again: {again}")
                    pytest.skip(flat.read_text())

    def calibration(self, model: Path, batch_sizes: Sequence[int], steps: int = 6) -> dict[str, Any]:
        """The JSON of the ``enginedead calibrate`` run the fit comes from (measured if need be)."""
        with self._measured(model, batch_sizes, steps) as (cache, _):
            data: dict[str, Any] = json.loads(cache.read_text())
            return data

    @contextlib.contextmanager
    def _measured(self, model: Path, batch_sizes: Sequence[int], steps: int) -> Iterator[tuple[Path, Path]]:
        # measured where it runs: an xdist worker's engines have their own cores
        cores = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "")
        key = hashlib.sha1(f"{model}|{list(batch_sizes)}|{steps}|{cores}".encode()).hexdigest()[:12]
        cache = self.root / f"enginedead-steps-{key}.json"
        with _locked(self.root / f"enginedead-steps-{key}.lock"):
            if not cache.exists():
                cache.write_text(json.dumps(_calibrate(model, batch_sizes, steps, cache)))
            yield cache, self.root / f"enginedead-steps-{key}.flat"


@pytest.fixture(scope="session")
def step_cost(tmp_path_factory: pytest.TempPathFactory) -> StepCosts:
    """This machine's decode steps per model and batch sizes (``StepCosts``)."""
    # under xdist the workers share the session's root; alone, the session's own directory
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    return StepCosts(root)


def _calibrate(model: Path, batch_sizes: Sequence[int], steps: int, cache: Path) -> dict[str, Any]:
    """``enginedead calibrate --json`` on ``model`` at ``batch_sizes``, ``steps`` steps each."""
    cmd = [sys.executable, "-m", "pytest_enginedead.command", "calibrate", "--model", str(model),
           "--batch-sizes", ",".join(map(str, batch_sizes)), "--steps", str(steps), "--json",
           "--log", str(cache.with_suffix(".log"))]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=MEASURE_BUDGET_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"measuring {model.name}'s decode steps at batch {list(batch_sizes)} took more than "
                    f"{MEASURE_BUDGET_S} s on this machine; measure at smaller batch sizes", pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"measuring {model.name}'s steps failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
