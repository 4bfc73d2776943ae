"""vLLM's OpenAI API server between releases: its engine client, its flags, its clients' errors.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import warnings
from typing import Any


def is_openai_failure(exc: BaseException) -> bool:
    """An ``openai`` client error that an engine death can cause (judged by the caller).

    ``InternalServerError`` (HTTP 5xx), an ``APIError`` inside a stream that began
    with 200, ``APIConnectionError`` once the server has gone.  A 4xx is the caller's.
    """
    try:
        import openai
    except ImportError:
        return False
    if isinstance(exc, (openai.InternalServerError, openai.APIConnectionError)):
        return True
    return isinstance(exc, openai.APIError) and not isinstance(exc, openai.APIStatusError)


#: (module, class, attribute) of the serving engine client's shutdown.  The API server
#: calls it last, in the main thread, when it leaves ``build_async_engine_client``:
#: after an engine death (its watchdog set uvicorn's ``should_exit``, and the process
#: would return 0) and after a SIGTERM alike; ``errored`` tells them apart when it is
#: first called (0.27.1-0.32.0; the launcher's module moved in between, this did not).
ENGINE_CLIENT_SHUTDOWN = ("vllm.v1.engine.async_llm", "AsyncLLM", "shutdown")


def engine_client_errored(client: Any) -> bool:
    """Whether a serving engine client's engine is dead (``AsyncLLM.errored``)."""
    try:
        return bool(getattr(client, "errored", False))
    except Exception:  # a half-built client: its properties may raise
        return False


#: Switches the harness turns on for every API server it starts (``server.server_command``).
SERVER_SWITCHES = ("enforce_eager", "disable_log_stats", "disable_uvicorn_access_log")


def server_flag(key: str, value: Any) -> str | None:
    """The ``--flag`` a server argument becomes, or None when it adds none.

    ``max_model_len=256`` → ``--max-model-len``; ``True`` → the bare flag; ``False``
    and None → nothing (vLLM's default is off), except a switch the harness turns on
    (``SERVER_SWITCHES``): ``enforce_eager=False`` → ``--no-enforce-eager``.
    """
    flag = "--" + key.replace("_", "-")
    if value is None or (value is False and key not in SERVER_SWITCHES):
        return None
    return "--no-" + flag[2:] if value is False else flag


#: Where the OpenAI API server builds its argument parser: 0.32.0, then older releases.
SERVER_ARG_PARSERS = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")

#: Where vLLM's argument parser class lives (0.11 on, then before).
FLEXIBLE_PARSERS = ("vllm.utils.argparse_utils", "vllm.utils")


@functools.lru_cache(maxsize=1)
def server_option_strings() -> frozenset[str] | None:
    """Every ``--flag`` ``python -m vllm.entrypoints.openai.api_server`` accepts, or None.

    Read from the server's own parser (``make_arg_parser``), without starting it.
    """
    for module_name in SERVER_ARG_PARSERS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                make = importlib.import_module(module_name).make_arg_parser
        except Exception:
            continue
        for parsers in FLEXIBLE_PARSERS:
            try:
                parser = make(importlib.import_module(parsers).FlexibleArgumentParser())
            except Exception:
                continue
            return frozenset(s for action in parser._actions for s in action.option_strings)
    return None
