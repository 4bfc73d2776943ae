"""Shared fixtures: a downstream repo (``downstream``) and a decoy ``VLLM::Worker``.

The helpers behind them live in ``downstream.py``; ``examples/`` holds the downstream
suites (copied into ``pytester`` directories, never collected here).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from downstream import Downstream

collect_ignore = ["examples"]


@pytest.fixture
def downstream(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[Downstream]:
    """A downstream repo whose runs load only what it names (``-p enginedead``), with no
    ``ENGINEDEAD_*`` settings from our own environment."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    for name in list(os.environ):
        if name.startswith("ENGINEDEAD_"):
            monkeypatch.delenv(name)
    repo = Downstream(pytester)
    yield repo
    repo.close()


@pytest.fixture(scope="session", autouse=True)
def _inner_runs_share_our_cores(pytestconfig: pytest.Config) -> None:
    """Under xdist, the downstream runs our tests start use this worker's cores only.

    The inner runs are not xdist workers themselves, so they would not split the
    machine; give them the worker's share the way the plugin gives its own engines.
    """
    from pytest_enginedead.distributed import cpu_bind

    cores = cpu_bind(pytestconfig)
    if cores is not None and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cores


@pytest.fixture(scope="session")
def decoy() -> Iterator[psutil.Process]:
    """A process titled like a vLLM worker that no harness started: it must survive."""
    proc = subprocess.Popen(["bash", "-c", "exec -a VLLM::Worker sleep 3600"])
    try:
        decoy = psutil.Process(proc.pid)
        deadline = time.monotonic() + 10
        while decoy.cmdline()[:1] != ["VLLM::Worker"]:  # until bash has exec'd
            assert time.monotonic() < deadline, decoy.cmdline()
            time.sleep(0.01)
        yield decoy
    finally:
        proc.kill()
        proc.wait()
