"""The ``enginedead`` console script: one parser over the commands."""

from __future__ import annotations

from tests.support.downstream import enginedead


def test_help_lists_both_commands() -> None:
    done = enginedead("--help")
    assert done.returncode == 0
    assert "check" in done.stdout and "calibrate" in done.stdout
