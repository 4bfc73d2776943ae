"""Tests that need vLLM (most start real engines, ~15-45 s each): skipped without it.

``step_cost(model, batch_sizes)`` measures a model's decode steps on this machine once per
session and set of cores (one engine, ``calibration.measure``; shared between xdist workers
that run on the same cores through a file under the session's temporary root) for the
tests that size a death from it (``machine.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from machine import FlatSteps, StepCost
from pytest_enginedead import compat

HERE = Path(__file__).resolve().parent

#: decode steps of ``model`` at ``sizes``, ``steps`` each, printed as one JSON line
MEASURE = (
    "import json, sys\n"
    "from pytest_enginedead.calibration import measure\n"
    "rows = measure(sys.argv[1], [int(n) for n in sys.argv[2].split(',')], int(sys.argv[3]))\n"
    "print('STEPS ' + json.dumps(rows))\n"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = compat.vllm_missing_reason()
    if reason is None:
        return
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def step_cost(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., StepCost]:
    """``step_cost(model, batch_sizes, steps=6)``: this machine's decode step on ``model``, fitted."""
    # under xdist the workers share the session's root; alone, the session's own directory
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent

    def measured(model: Path, batch_sizes: Sequence[int], steps: int = 6) -> StepCost:
        # measured where it runs: an xdist worker's engines have their own cores
        cores = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "")
        key = hashlib.sha1(f"{model}|{list(batch_sizes)}|{steps}|{cores}".encode()).hexdigest()[:12]
        cache = root / f"enginedead-steps-{key}.json"
        flat = root / f"enginedead-steps-{key}.flat"
        with _locked(root / f"enginedead-steps-{key}.lock"):
            if flat.exists():  # measured twice already by another test of the session
                pytest.skip(flat.read_text())
            if not cache.exists():
                cache.write_text(json.dumps(_measure(model, batch_sizes, steps)))
            try:
                return StepCost.fit(str(model), json.loads(cache.read_text()))
            except FlatSteps as first:
                # a busy neighbour (the other xdist worker) can drown a fast box's per-sequence
                # cost in one measurement: measure once more, then say why the test cannot size
                cache.write_text(json.dumps(_measure(model, batch_sizes, steps)))
                try:
                    return StepCost.fit(str(model), json.loads(cache.read_text()))
                except FlatSteps as again:
                    flat.write_text(f"this machine cannot size the test: {first}; measured again: {again}")
                    pytest.skip(flat.read_text())

    return measured


#: the most one measurement may take; it is a fixture of a test with pytest-timeout's 900 s
MEASURE_BUDGET_S = 600


def _measure(model: Path, batch_sizes: Sequence[int], steps: int) -> list[dict[str, float]]:
    try:
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, str(model), ",".join(map(str, batch_sizes)), str(steps)],
            capture_output=True, text=True, timeout=MEASURE_BUDGET_S, check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"measuring {model.name}'s decode steps at batch {list(batch_sizes)} took more than "
                    f"{MEASURE_BUDGET_S} s on this machine; measure at smaller batch sizes", pytrace=False)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("STEPS ")), None)
    if done.returncode != 0 or line is None:
        pytest.fail(f"measuring {model.name}'s steps failed:\n{done.stderr[-3000:]}")
    rows: list[dict[str, float]] = json.loads(line.removeprefix("STEPS "))
    return rows


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
