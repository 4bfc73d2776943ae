"""Phase markers for the Ctrl-C table: files the outer test waits for before it presses Ctrl-C.

``judging``: a death reached ``assert_no_false_death`` and its evidence is being gathered
(our own ``judge_death`` wrapped, the only way to see that phase from outside).  The phase is held
open after the verdict, before the failure is raised: a server's death is judged in a blink
once vLLM has stopped its worker, and on a busy box the Ctrl-C pressed on the marker came
after the run had ended (exit 1, once in a clean-clone run on the 2-core AVX2 box);
``teardown``: the session is finishing and the engines are about to be stopped.
"""

import pathlib
import time

import pytest

from pytest_enginedead.pytest_plugin import assertions

_judge = assertions.judge_death


#: how long the evidence phase is held open after the verdict (the Ctrl-C ends it)
HOLD_S = 60


def _marked_judge(*args, **kwargs):
    pathlib.Path("judging").write_text("now")
    verdict = _judge(*args, **kwargs)
    time.sleep(HOLD_S)
    return verdict


def pytest_configure(config):
    assertions.judge_death = _marked_judge  # where assert_no_false_death looks it up


def pytest_unconfigure(config):
    assertions.judge_death = _judge  # an in-process run (a collection of every example) leaves it as it was


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    pathlib.Path("teardown").write_text("now")
