"""Shared helpers: run pytest as a downstream repo would (``-p enginedead``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import psutil
import pytest


@pytest.fixture
def downstream(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester whose runs load only what a downstream repo names: ``-p enginedead``."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    for name in list(os.environ):
        if name.startswith("ENGINEDEAD_"):
            monkeypatch.delenv(name)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In-process pytest with the plugin, as ``pytest -p enginedead ARGS``."""
    return pytester.runpytest("-p", "enginedead", *args)


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
        yield psutil.Process(proc.pid)
    finally:
        proc.kill()
        proc.wait()
