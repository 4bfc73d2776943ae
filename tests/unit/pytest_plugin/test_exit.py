"""The host process at its exit, after a run that started engines: the user's stdout and stderr
stay open (a conftest's exit handler still prints), and triton's objects are freed before nanobind
counts them (no "leaked" report on stderr).

No engine starts here: the run is told one did (``pool.started``), and it imports triton as vLLM
would; what the plugin does at the exit is the same.
"""

from __future__ import annotations

import pytest

from tests.support.downstream import Downstream

CONFTEST = """
import atexit, sys

import pytest

import triton  # as vLLM imports it: a nanobind extension, which counts its objects at the exit
import triton.language

from pytest_enginedead.pytest_plugin.run import run_key


def _said_at_exit():
    print("conftest: stdout still open", flush=True)
    print("conftest: stderr still open", file=sys.stderr, flush=True)


atexit.register(_said_at_exit)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    session.config.stash[run_key].pool.started = 1  # as after a run whose tests started an engine
"""


@pytest.mark.processes
def test_after_a_run_with_engines_the_users_exit_handlers_still_print_and_nothing_leaks(
    downstream: Downstream,
) -> None:
    pytest.importorskip("triton")
    downstream.pytester.makeconftest(CONFTEST)
    downstream.pytester.makepyfile("def test_plain():\n    pass\n")
    result = downstream.run(in_subprocess=True, timeout=120)
    assert result.ret == pytest.ExitCode.OK, result.result.stdout.str()[-3000:]
    lines = [ln for ln in result.stdout.lines if ln.strip()]
    assert lines[-1] == "conftest: stdout still open", lines[-3:]
    err = result.stderr.str()
    assert "conftest: stderr still open" in err, err[-3000:]
    assert "nanobind" not in err and "leaked" not in err, err[-3000:]
