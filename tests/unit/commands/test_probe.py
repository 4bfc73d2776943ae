"""``enginedead probe``: its command lines and exit codes (0 alive, 1 not, 2 bad usage)."""

from __future__ import annotations

import pytest

from pytest_enginedead import command
from tests.support.standins import free_port


def test_probe_command_lines_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    nobody = free_port()
    assert command.main(["probe", "--port", str(nobody)]) == 1
    assert capsys.readouterr().out == f"enginedead probe: dead: nothing listens on port {nobody}\n"
    for bad in (["--port", "0"], ["--port", "x"], ["--pid", "-3"], ["--port", "1", "--pid", "2"]):
        with pytest.raises(SystemExit) as info:
            command.main(["probe", *bad])
        assert info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("enginedead probe: error:"), err
