"""What a test holds: a handle's bad argument is one line, and the engine stays in service."""

from __future__ import annotations

import pytest

from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL

# --- the handles' own arguments -------------------------------------------------------------

#: (id, method, arguments, what the line must say[, the engine's arguments]): each refused before
#: the engine sees it
HANDLE_CASES = [
    ("generate-arriving-negative", "generate", {"arriving": -1},
     ("EngineHandle.generate: arriving=-1 is not a whole number >= 1", "None: all at once")),
    ("generate-arriving-zero", "generate", {"arriving": 0}, ("arriving=0 is not a whole number >= 1",)),
    ("generate-prompt-len-zero", "generate", {"prompt_len": 0}, ("EngineHandle.generate: prompt_len=0",)),
    ("generate-n-zero", "generate", {"n": 0}, ("EngineHandle.generate: n=0 is not a whole number >= 1",)),
    ("generate-n-fraction", "generate", {"n": 2.5}, ("n=2.5 is not a whole number",)),
    ("generate-max-tokens-bool", "generate", {"max_tokens": True}, ("max_tokens=True is not a whole",)),
    ("generate-max-tokens-text", "generate", {"max_tokens": "8"}, ("max_tokens='8' is not a whole",)),
    ("generate-past-max-model-len", "generate", {"prompt_len": 500, "max_tokens": 20},
     ("prompt_len=500 + max_tokens=20 is 520 tokens, more than the engine's max_model_len 512",
      "max_model_len=N")),
    ("complete-n-negative", "complete", {"n": -4}, ("ServerHandle.complete: n=-4 is not a whole number",)),
    ("complete-prompt-len-zero", "complete", {"prompt_len": 0}, ("ServerHandle.complete: prompt_len=0",)),
    ("complete-max-tokens-none", "complete", {"max_tokens": None}, ("max_tokens=None is not a whole",)),
    ("complete-stream-text", "complete", {"stream": "yes"}, ("stream='yes' is not True or False",)),
    ("complete-past-max-model-len", "complete", {"prompt_len": 508, "max_tokens": 4},
     ("prompt_len=508 + max_tokens=4 + 1 (the tokenizer's BOS token) is 513 tokens",)),
    ("complete-past-a-factory-max-model-len", "complete", {"prompt_len": 60, "max_tokens": 8},
     ("is 69 tokens, more than the engine's max_model_len 64",), (("max_model_len", 64),)),
]


@pytest.mark.parametrize(("method", "kwargs", "needles", "extra"), [(*c[1:4], c[4] if len(c) > 4 else ())
                                                                   for c in HANDLE_CASES],
                         ids=[c[0] for c in HANDLE_CASES])
def test_a_handles_bad_argument_is_one_line_and_the_engine_stays(
    method: str, kwargs: dict[str, object], needles: tuple[str, ...], extra: tuple[tuple[str, object], ...]
) -> None:
    """``generate`` / ``complete`` check every argument before the engine (or server) sees it:
    the test fails in one line naming the value (``pytest.fail``, no traceback), and the engine
    is not marked broken, so a shared one stays in service (on a real engine:
    tests/engine/test_guard.py).  The engines here were never started: reaching them fails."""
    from pytest_enginedead.harness.engines.offline import Engine
    from pytest_enginedead.harness.engines.server import Server
    from pytest_enginedead.logic.planning.engines import DeadlineAndFaults, EngineSpec
    from pytest_enginedead.pytest_plugin.handles import EngineHandle, ServerHandle

    server = method == "complete"
    engine = (Server if server else Engine)(EngineSpec(BUNDLED_MODEL, 8, extra, server=server))
    handle = (ServerHandle if server else EngineHandle)(engine, 8, DeadlineAndFaults(300.0))
    try:
        with pytest.raises(pytest.fail.Exception) as info:
            getattr(handle, method)(**kwargs)
    finally:
        engine.stop()
    message = str(info.value)
    assert not info.value.pytrace and "\n" not in message, message
    for needle in needles:
        assert needle in message, (needle, message)
    assert not engine.broken
