"""Phase markers for the Ctrl-C table: files the outer test waits for before it presses Ctrl-C.

``judging``: a death reached ``assert_no_false_death`` and its evidence is being gathered
(our own ``judge`` wrapped, the only way to see that phase from outside);
``teardown``: the session is finishing and the engines are about to be stopped.
"""

import pathlib

import pytest

from pytest_enginedead import assertions

_judge = assertions.judge


def _marked_judge(*args, **kwargs):
    pathlib.Path("judging").write_text("now")
    return _judge(*args, **kwargs)


assertions.judge = _marked_judge


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    pathlib.Path("teardown").write_text("now")
