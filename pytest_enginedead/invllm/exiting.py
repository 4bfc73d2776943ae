"""The part of pytest-enginedead that runs in the serving process (vLLM's API server).

After its engine dies, vLLM's API server shuts down and returns status 0, so a
supervisor that restarts on failure (``systemd Restart=on-failure``, a container
runtime's on-failure policy) never restarts it.  With ``ENGINEDEAD_EXIT_ON_DEATH=1``
it exits with a status that says what happened instead, after vLLM's own shutdown
has run, with one log line saying why:

* ``EXIT_HUNG`` (71): the guard found the worker idle inside a step for ``hang_s``
  and ended the engine's wait;
* ``EXIT_DEAD`` (70): any other death (vLLM's deadline, a worker that exited, a step
  past the guard's cap).

Unset, nothing here touches vLLM.  The same process also names itself to the engine
cores it starts (``ENV_FRONT_PID``) and removes their guard states when it exits.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import multiprocessing
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..compat import in_server
from ..contract.decisions import GuardAction
from ..contract.guardfiles import guard_state_pid, read_guard_state, state_dir
from ..contract.names import ENV_FRONT_PID, EXIT_DEAD, EXIT_ENV, EXIT_HUNG
from ..logic.inputs.guardconfig import guard_asked
from .stale import remove_stale_states

logger = logging.getLogger("vllm.enginedead")

_exited = False  # this process has raised its SystemExit already


def asked(environ: Mapping[str, str]) -> bool:
    """Whether ``ENGINEDEAD_EXIT_ON_DEATH`` asks for a non-zero exit after a death."""
    return environ.get(EXIT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def in_front() -> bool:
    """This is the process that builds the engine (not an engine core, not a worker)."""
    return multiprocessing.current_process().name == "MainProcess"


def death_exit(directory: str, front: int) -> tuple[int, str]:
    """(the exit status, why) for an engine death of ``front``'s engine, from its guard states."""
    states = []
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(directory)):
            if guard_state_pid(name) is None:
                continue
            state = read_guard_state(os.path.join(directory, name))
            if state is not None and state.front == front:
                states.append(state)
    for state in states:
        if state.ended is GuardAction.END:
            idle = state.updated - state.busy_at
            return EXIT_HUNG, (
                f"the engine died: the guard found VLLM::Worker pid {state.worker} idle {idle:.1f} s "
                f"inside step {state.step} (hang_s {state.hang_s:g} s) and ended its wait"
            )
    for state in states:
        if state.ended is GuardAction.CAP:
            return EXIT_DEAD, (
                f"the engine died: step {state.step} (batch {state.batch}) outlived the guard's "
                f"{state.cap_s:g} s cap"
            )
    return EXIT_DEAD, "the engine died (EngineDeadError)"


def _wrap_shutdown(original: Callable[..., Any], directory: str) -> Callable[..., Any]:
    def shutdown(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _exited
        died = getattr(self, "_enginedead_died", None)
        if died is None:  # decided at the first call: a SIGTERM's shutdown finds no death yet
            died = in_server.engine_client_errored(self)
            with contextlib.suppress(AttributeError):
                self._enginedead_died = died
        try:
            return original(self, *args, **kwargs)
        finally:
            if died and not _exited and threading.current_thread() is threading.main_thread():
                _exited = True
                code, why = death_exit(directory, os.getpid())
                logger.error("enginedead: %s; exiting with status %d (%s=1)", why, code, EXIT_ENV)
                raise SystemExit(code)

    shutdown.__enginedead__ = True  # type: ignore[attr-defined]
    return shutdown


def register(environ: Mapping[str, str] | None = None) -> bool:
    """In the serving process: name it to its engine cores; with the opt-in, exit loudly.

    Returns whether the exit status was taken over.
    """
    environ = os.environ if environ is None else environ
    if not in_front():
        return False
    directory = state_dir(environ)
    if guard_asked(environ) or asked(environ):
        os.environ[ENV_FRONT_PID] = str(os.getpid())
        atexit.register(remove_stale_states, directory, os.getpid())
    if not asked(environ):
        return False
    module, cls_name, attr = in_server.ENGINE_CLIENT_SHUTDOWN
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except (ImportError, AttributeError) as exc:
        logger.error("enginedead: %s=1 cannot take over the exit status here (%s)", EXIT_ENV, exc)
        return False
    current = getattr(cls, attr)
    if not getattr(current, "__enginedead__", False):
        setattr(cls, attr, _wrap_shutdown(current, directory))
    return True
