"""The ``enginedead`` console script: one parser over the commands."""

from __future__ import annotations

import importlib.metadata

import pytest

from pytest_enginedead.compat import versions
from tests.support.downstream import enginedead


@pytest.mark.processes
def test_help_lists_both_commands() -> None:
    done = enginedead("--help")
    assert done.returncode == 0
    assert "check" in done.stdout and "calibrate" in done.stdout


@pytest.mark.processes
def test_version_names_the_plugin_and_the_vllm_beside_it() -> None:
    """Both from package metadata: the distribution's version, and vLLM's or "not installed"."""
    done = enginedead("--version")
    assert done.returncode == 0 and done.stderr == ""
    vllm = versions.installed_version() or "not installed"
    mine = importlib.metadata.version("pytest-enginedead")
    assert done.stdout == f"enginedead (pytest-enginedead) {mine}; vLLM {vllm}\n"
    assert "unknown" not in done.stdout


@pytest.mark.processes
def test_version_is_no_command_and_takes_none() -> None:
    """``--version`` belongs to ``enginedead`` alone: after a command it is an unknown argument."""
    done = enginedead("doctor", "--version")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "enginedead: error: unrecognized arguments: --version\n"


@pytest.mark.processes
def test_help_starts_with_doctor_and_says_where_exit_statuses_are() -> None:
    done = enginedead("--help")
    assert "--version" in done.stdout and "Start with `enginedead doctor`" in done.stdout
    assert done.stdout.index("doctor") < done.stdout.index("check")
