"""What is checked before any engine starts that needs the installed vLLM to answer: a factory's
engine arguments against vLLM's own lists."""

from __future__ import annotations

import pytest

from pytest_enginedead.compat import in_server, llm_api
from pytest_enginedead.harness.preflight import factory_engine_args
from pytest_enginedead.logic.arguments import BadMarker


def test_a_factorys_engine_arguments_are_held_against_vllms_own_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Names vLLM does not take fail in one line naming each, with the near misses (the lists
    stand in for the installed vLLM's; the real ones are read in tests/engine/test_compat_vllm.py);
    a vLLM that cannot say lets the names through to its own start."""

    monkeypatch.setattr(llm_api, "engine_argument_names",
                        lambda: frozenset({"max_model_len", "enforce_eager"}))
    monkeypatch.setattr(in_server, "server_option_strings",
                        lambda: frozenset({"--max-model-len", "--enforce-eager", "--no-enforce-eager"}))
    factory_engine_args("f", {"max_model_len": 256, "enforce_eager": False}, server=False)
    factory_engine_args("f", {"max_model_len": 256, "enforce_eager": False, "x": None}, server=True)
    with pytest.raises(BadMarker) as info:
        factory_engine_args("vllm_engine_factory", {"no_such_flag": 1, "max_modl_len": 3},
                                    server=False)
    assert str(info.value).startswith("vllm_engine_factory: no_such_flag=1, max_modl_len=3 are not engine "
                                      "arguments of vLLM"), info.value
    assert "did you mean max_model_len?" in str(info.value)
    with pytest.raises(BadMarker, match="no_such_flag=1 becomes --no-such-flag, which the API"):
        factory_engine_args("vllm_server_factory", {"no_such_flag": 1}, server=True)
    with pytest.raises(BadMarker, match="disable_log_stats=False becomes --no-disable-log-stats"):
        factory_engine_args("vllm_server_factory", {"disable_log_stats": False}, server=True)
    monkeypatch.setattr(llm_api, "engine_argument_names", lambda: None)
    monkeypatch.setattr(in_server, "server_option_strings", lambda: None)
    factory_engine_args("f", {"no_such_flag": 1}, server=False)
    factory_engine_args("f", {"no_such_flag": 1}, server=True)
