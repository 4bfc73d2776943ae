"""The soak's supervisor restarts the server as an operator's does: a restart keeps the first start's
port (one clear line where something else holds it) and its guard state directory."""

from __future__ import annotations

import os
import shutil
import socket

import pytest

from pytest_enginedead.contract.names import STATE_DIR_ENV
from pytest_enginedead.harness.engines.coreready import EngineStartError
from pytest_enginedead.harness.load import supervisor
from pytest_enginedead.harness.load.supervisor import SoakServer, Supervisor, bindable
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.planning.engines import DeadlineAndFaults, EngineSpec, GuardSpec

SPEC = EngineSpec(BUNDLED_MODEL, 8, guard=GuardSpec(3.0, "edcap:cap"), server=True)


def test_a_restart_keeps_the_port_and_fails_in_one_line_where_it_is_taken(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "REBIND_S", 0.3)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not bindable(port)
        server = SoakServer(SPEC, None, port, None)
        with pytest.raises(EngineStartError) as caught:
            server.pick_port()
    assert str(caught.value) == (f"the server's port {port} could not be bound again for its restart "
                                 "within 0.3 s (something else listens on it)")
    assert bindable(port) and server.pick_port() == port
    fresh = SoakServer(SPEC, None)
    assert fresh.pick_port() != 0
    for made in (server, fresh):
        shutil.rmtree(made.run_dir, ignore_errors=True)


def test_every_start_shares_the_state_directory_the_supervisor_removes() -> None:
    sup = Supervisor(SPEC, DeadlineAndFaults(2.0), None)
    server = SoakServer(SPEC, None, 0, sup.state_dir)
    env = server.environment(DeadlineAndFaults(2.0))
    shutil.rmtree(server.run_dir, ignore_errors=True)
    assert env[STATE_DIR_ENV] == sup.state_dir and os.path.isdir(sup.state_dir)
    sup.close()
    assert not os.path.exists(sup.state_dir)
