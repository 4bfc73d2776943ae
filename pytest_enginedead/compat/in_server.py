"""vLLM's OpenAI API server between releases: its engine client, its flags, its clients' errors.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import re
import warnings
from collections.abc import Iterator
from typing import Any, NoReturn


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

    ``max_model_len=256`` → ``--max-model-len``; ``True`` → the bare flag; None → nothing;
    ``False`` → ``--no-<flag>`` where vLLM's parser defines it (a ``BooleanOptionalAction``,
    or a switch with a ``--no-`` twin; ``enforce_eager=False`` → ``--no-enforce-eager``), nothing
    for a switch without one (vLLM's default is off), else the flag with the value ``False``
    for vLLM's parser to judge.  Where the parser cannot be read, ``False`` → ``--no-<flag>``
    for the switches the harness turns on (``SERVER_SWITCHES``) and nothing for the others.
    """
    flag = "--" + key.replace("_", "-")
    if value is None:
        return None
    if value is not False:
        return flag
    negated = "--no-" + flag[2:]
    parser = server_parser() if key not in SERVER_SWITCHES else None
    if parser is None:
        return negated if key in SERVER_SWITCHES else None
    if negated in parser._option_string_actions:
        return negated
    action = parser._option_string_actions.get(flag)
    return flag if action is not None and action.nargs != 0 else None


def server_tokens(key: str, value: Any) -> list[str]:
    """The command-line words a server argument becomes, as vLLM's parser reads them.

    A switch is its flag alone; a dict is JSON; a list is one word per item for an option
    that takes several (``nargs``) or repeats (``append``), else JSON; anything else ``str``.
    """
    flag = server_flag(key, value)
    if flag is None:
        return []
    if isinstance(value, bool) and (value or flag.startswith("--no-")):
        return [flag]
    parser = server_parser() if isinstance(value, (list, tuple)) else None
    action = parser._option_string_actions.get(flag) if parser is not None else None
    if isinstance(value, (list, tuple)) and action is not None:
        if isinstance(action, argparse._AppendAction):
            return [word for item in value for word in (flag, _word(item))]
        if action.nargs in ("+", "*") or (isinstance(action.nargs, int) and action.nargs > 1):
            return [flag, *map(_word, value)]
    return [flag, _word(value)]


def _word(value: Any) -> str:
    """One value as a command-line word: JSON for a dict or a list (vLLM's parsers read JSON)."""
    if isinstance(value, (dict, list, tuple)):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class ServerArgError(ValueError):
    """vLLM's API server parser refused its arguments; the message is its own."""


def server_args_problem(words: list[str]) -> str | None:
    """What vLLM's API server parser says of these command-line words, or None (also when it
    cannot say: no parser here).  Nothing starts: the parser alone reads them."""
    parser = server_parser()
    if parser is None or not words:
        return None
    try:
        with warnings.catch_warnings(), _logs_held():  # the parser logs duplicate keys, deprecations
            warnings.simplefilter("ignore")
            parser.parse_args(words)
    except ServerArgError as exc:
        return re.sub(r" at 0x[0-9a-f]+>", ">", str(exc))  # a function's address says nothing
    except SystemExit as exc:  # an action that exits (--help): not a server argument
        return f"it exits the parser (status {exc.code})"
    except Exception:  # what vLLM does after parsing is its own start's to say
        return None
    return None


@contextlib.contextmanager
def _logs_held() -> Iterator[None]:
    """No log record at WARNING or below while vLLM is imported or parses (it logs as it goes)."""
    held = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(held)


#: Where the OpenAI API server builds its argument parser: 0.32.0, then older releases.
SERVER_ARG_PARSERS = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")

#: Where vLLM's argument parser class lives (0.11 on, then before).
FLEXIBLE_PARSERS = ("vllm.utils.argparse_utils", "vllm.utils")


@functools.lru_cache(maxsize=1)
def server_parser() -> argparse.ArgumentParser | None:
    """``python -m vllm.entrypoints.openai.api_server``'s own argument parser (``make_arg_parser``),
    built once per process (importing it takes seconds), or None where this vLLM cannot say.

    Its usage errors raise ``ServerArgError`` instead of exiting the process.  What importing
    vLLM logs (``Triton is installed, but ...``) is not the caller's: it is held back.
    """
    with _logs_held():
        return _built_parser()


def _built_parser() -> argparse.ArgumentParser | None:
    for module_name in SERVER_ARG_PARSERS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                make = importlib.import_module(module_name).make_arg_parser
        except Exception:
            continue
        for parsers in FLEXIBLE_PARSERS:
            try:
                flexible = importlib.import_module(parsers).FlexibleArgumentParser
                parser: argparse.ArgumentParser = make(flexible())
            except Exception:
                continue
            parser.error = _raise  # type: ignore[method-assign]
            return parser
    return None


def _raise(message: str) -> NoReturn:
    raise ServerArgError(message)


def server_option_strings() -> frozenset[str] | None:
    """Every ``--flag`` ``python -m vllm.entrypoints.openai.api_server`` accepts, or None.

    Read from the server's own parser (``server_parser``), without starting it.
    """
    parser = server_parser()
    if parser is None:
        return None
    return frozenset(s for action in parser._actions for s in action.option_strings)


#: (module, function) that builds the registry vLLM's ``/metrics`` serves: prometheus_client's default
#: registry with one API server, a fresh one over ``PROMETHEUS_MULTIPROC_DIR`` with several
#: (``--api-server-count``); the route is mounted once, when the app is built (0.32.0).
METRICS_REGISTRY = ("vllm.v1.metrics.prometheus", "get_prometheus_registry")

#: what ``multiprocessing`` names each API server process when vLLM runs several (``ApiServer_0`` ...)
API_SERVER_PROCESS_PREFIX = "ApiServer"
