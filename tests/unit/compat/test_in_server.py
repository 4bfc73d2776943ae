"""vLLM's API server between releases: an engine argument becomes its flag, as the server's own
parser reads it (its stand-in here: ``badinput.SERVER_PARSER``; vLLM's own in
``tests/engine/test_compat_vllm.py``)."""

from __future__ import annotations

import pytest

from pytest_enginedead.compat import in_server
from tests.support.badinput import stand_in_server_parser


def test_server_arguments_become_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """``max_model_len=256`` → ``--max-model-len 256``; True → the bare flag; None adds nothing;
    False → ``--no-<flag>`` for every boolean flag the parser defines, nothing for a switch without
    a ``--no-`` twin; a switch the harness turns on, False turns off again (the last one wins)."""
    from pytest_enginedead.harness.engines.server import server_command

    monkeypatch.setattr(in_server, "server_parser", stand_in_server_parser)
    assert in_server.server_flag("max_model_len", 256) == "--max-model-len"
    assert in_server.server_flag("enable_prefix_caching", False) == "--no-enable-prefix-caching"
    assert in_server.server_flag("enforce_eager", False) == "--no-enforce-eager"
    assert in_server.server_flag("disable_log_stats", False) == "--no-disable-log-stats"  # the harness's own
    assert in_server.server_flag("seed", False) == "--seed"  # a value: False is the parser's to judge
    cmd = server_command("/m", 1234, 8, "m", (("max_model_len", 256), ("enable_prefix_caching", False),
                                              ("enforce_eager", False), ("seed", None)))
    assert cmd[cmd.index("--max-model-len", cmd.index("--max-model-len") + 1) + 1] == "256"
    assert "--no-enable-prefix-caching" in cmd and "--seed" not in cmd
    assert cmd.index("--no-enforce-eager") > cmd.index("--enforce-eager")  # the last one wins


def test_dicts_and_lists_become_json_or_one_word_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dict is JSON (``--hf-overrides '{"num_hidden_layers": 2}'``), never Python's repr; a list is
    JSON where the option takes one value, one word per item where it repeats or takes several."""
    monkeypatch.setattr(in_server, "server_parser", stand_in_server_parser)
    assert in_server.server_tokens("hf_overrides", {"num_hidden_layers": 2}) == [
        "--hf-overrides", '{"num_hidden_layers": 2}']
    assert in_server.server_tokens("allowed_origins", ["http://a"]) == ["--allowed-origins", '["http://a"]']
    assert in_server.server_tokens("middleware", ["a.b", "c.d"]) == [
        "--middleware", "a.b", "--middleware", "c.d"]
    assert in_server.server_tokens("enable_prefix_caching", True) == ["--enable-prefix-caching"]
    assert in_server.server_tokens("seed", None) == []
    for key, value in (("hf_overrides", {"num_hidden_layers": 2}), ("allowed_origins", ["http://a"]),
                       ("enable_prefix_caching", False), ("middleware", ["a.b"])):
        assert in_server.server_args_problem(in_server.server_tokens(key, value)) is None, key
    assert in_server.server_args_problem(["--allowed-origins", "['http://a']"]) == (
        "argument --allowed-origins: invalid loads value: \"['http://a']\"")
    assert in_server.server_args_problem(["--no-such-flag"]) == "unrecognized arguments: --no-such-flag"


def test_where_the_parser_cannot_be_read_the_old_rules_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """No parser to ask (a vLLM that cannot say): False turns off only the harness's own switches,
    dicts and lists are still JSON, and nothing is refused here (vLLM's start will say)."""
    monkeypatch.setattr(in_server, "server_parser", lambda: None)
    assert in_server.server_flag("enable_prefix_caching", False) is None
    assert in_server.server_flag("enforce_eager", False) == "--no-enforce-eager"
    assert in_server.server_tokens("hf_overrides", {"a": 1}) == ["--hf-overrides", '{"a": 1}']
    assert in_server.server_args_problem(["--no-such-flag"]) is None
    assert in_server.server_option_strings() is None
