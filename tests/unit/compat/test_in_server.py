"""vLLM's API server between releases: an engine argument becomes its flag."""

from __future__ import annotations

from pytest_enginedead.compat import in_server


def test_server_arguments_become_flags() -> None:
    """``max_model_len=256`` → ``--max-model-len 256``; True → the bare flag; False and None add
    nothing, except for a switch the harness turns on, which False turns off again."""
    from pytest_enginedead.harness.server import server_command

    assert in_server.server_flag("max_model_len", 256) == "--max-model-len"
    assert in_server.server_flag("enable_prefix_caching", False) is None
    assert in_server.server_flag("enforce_eager", False) == "--no-enforce-eager"
    cmd = server_command("/m", 1234, 8, "m", (("max_model_len", 256), ("enable_lora", True),
                                              ("enforce_eager", False), ("seed", None)))
    assert cmd[cmd.index("--max-model-len", cmd.index("--max-model-len") + 1) + 1] == "256"
    assert "--enable-lora" in cmd and "--seed" not in cmd
    assert cmd.index("--no-enforce-eager") > cmd.index("--enforce-eager")  # the last one wins
