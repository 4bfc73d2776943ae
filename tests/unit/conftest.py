"""Fixtures the unit tests share: no engine may start (``no_engine`` in this process,
``no_child_engine`` in the processes it starts), a private temporary directory, a stubbed
registry, an offline engine that was never started.

The conventions they serve are ``tests/support/badinput.py``'s.
"""

from __future__ import annotations

import _posixsubprocess
import os
import platform
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_enginedead.compat import in_server, llm_api, registry, versions
from pytest_enginedead.harness.engines.offline import Engine
from pytest_enginedead.harness.engines.pool import EnginePool
from pytest_enginedead.logic import releases
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.planning.engines import EngineSpec
from tests.support.badinput import (
    ENGINE_ARGUMENTS,
    ENGINE_IMPORT_REFUSAL,
    KNOWN,
    REGISTRY_STUB,
    stand_in_server_parser,
)
from tests.support.records import WORKER

#: Python looks the processor up once per process, by running ``uname -p`` (``platform.platform()``,
#: which ``logic.machine.this_machine`` records): looked up here, before a test refuses processes,
#: so that which test first asks for it does not decide which one "starts a process"
platform.uname().processor  # noqa: B018


@pytest.fixture(autouse=True)
def processes_only_where_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test without the ``processes`` marker starts no process: the fast loop (``make
    test-fast``: ``tests/unit -m "not processes"``) is exactly the tests that start none."""
    if request.node.get_closest_marker("processes") is not None:
        return

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid} starts a process: mark it @pytest.mark.processes "
                             "(make test-fast leaves those out)")

    for owner, name in ((subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec"), (os, "fork"),
                        (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system")):
        monkeypatch.setattr(owner, name, refused)


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """In-process runs: the engine paths are reachable (vLLM counts as present), but an
    engine start is recorded and refused; the list of attempts must stay empty."""
    started: list[str] = []

    def refuse(self: EnginePool, spec: object, *args: object, **kwargs: object) -> None:
        started.append(repr(spec))
        raise AssertionError("ENGINE STARTED: bad input must be refused before any engine starts")

    monkeypatch.setattr(EnginePool, "start_dedicated", refuse)
    monkeypatch.setattr(versions, "vllm_missing_reason", lambda: None)
    # vLLM's registry, asked of every model before an engine starts, and its API server's parser,
    # asked of a factory's server arguments: not imported here
    monkeypatch.setattr(registry, "known_architectures", lambda: KNOWN)
    monkeypatch.setattr(in_server, "server_parser", stand_in_server_parser)
    monkeypatch.setattr(llm_api, "engine_argument_names", lambda: ENGINE_ARGUMENTS)
    monkeypatch.delenv(releases.DEADLINE_ENV, raising=False)
    yield started
    assert started == [], "an engine start was attempted"


@pytest.fixture
def no_child_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Subprocesses started from this test carry the import no_engine; yields its record file."""
    site = tmp_path / "no-engine-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(ENGINE_IMPORT_REFUSAL)
    record = tmp_path / "engine-imports.log"
    path = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    monkeypatch.setenv("ENGINEDEAD_TEST_ENGINE_IMPORTS", str(record))
    for name in list(os.environ):
        if name.startswith("ENGINEDEAD_") and name != "ENGINEDEAD_TEST_ENGINE_IMPORTS":
            monkeypatch.delenv(name)
    monkeypatch.delenv(releases.DEADLINE_ENV, raising=False)
    yield record
    assert not record.exists(), f"an engine was about to start: {record.read_text()}"


@pytest.fixture
def stub_registry(no_child_engine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The registry stub, in this process and (through the no_engine's sitecustomize) in its children;
    yields the file where the children record who asked it."""
    with open(tmp_path / "no-engine-site" / "sitecustomize.py", "a") as f:
        f.write(REGISTRY_STUB)
    calls = tmp_path / "registry-calls"
    monkeypatch.setenv("ENGINEDEAD_TEST_REGISTRY_CALLS", str(calls))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # ours, when this suite runs under xdist
    monkeypatch.setattr(registry, "known_architectures", lambda: {"LlamaForCausalLM"})
    monkeypatch.setattr(in_server, "server_parser", stand_in_server_parser)
    return calls


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of our own, for this process and the ones it starts."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    return tmp


@pytest.fixture
def engine() -> Iterator[Engine]:
    """An offline ``Engine`` never started, its worker the hand-written record's (``records.WORKER``):
    its rows are computed as after a real run (``records.write_steps``)."""
    made = Engine(EngineSpec(BUNDLED_MODEL, 64))
    made.procs = [WORKER]
    made.shm = {"/dev/shm/psm_b", "/dev/shm/psm_a"}
    try:
        yield made
    finally:
        made.stop()  # ends nothing (no process of ours) and removes the run directory
        assert not os.path.exists(made.run_dir)
