"""An offline engine and an API server, each in a long step, in a false death, or idle.

The outer test (tests/engine/test_cut_short.py) picks one with ``-k`` and presses Ctrl-C
at one phase: while the engine starts, mid-step (16 s busy steps, ``generating``
written just before), while a death's evidence is gathered (16 s steps under a 1 s
deadline), or while the engines stop at the end of the session.
"""

import pathlib

import pytest

from pytest_enginedead import assert_no_false_death

pytestmark = pytest.mark.enginedead_batch_sizes(8)


@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)
def test_engine_long_step(vllm_engine):
    pathlib.Path("generating").write_text("now")
    vllm_engine.generate(max_tokens=4)


@pytest.mark.enginedead_timeout(1)
@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)
def test_engine_false_death(vllm_engine):
    with assert_no_false_death(vllm_engine):
        vllm_engine.generate(max_tokens=2)


def test_engine_quick(vllm_engine):
    assert len(vllm_engine.generate(max_tokens=2)) == 8


@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)
def test_server_long_step(vllm_server):
    pathlib.Path("generating").write_text("now")
    vllm_server.complete(max_tokens=4)


@pytest.mark.enginedead_timeout(1)
@pytest.mark.enginedead_inject(slow_s_per_seq=2.0)
def test_server_false_death(vllm_server):
    with assert_no_false_death(vllm_server):
        vllm_server.complete(max_tokens=2)


def test_server_quick(vllm_server):
    assert len(vllm_server.complete(max_tokens=2)) == 8
