"""What the engine core says of itself as it starts (``contract.guardfiles.CoreReady``), checked:
our plugin loaded there, and its guard is the one the engine was asked to run with.

A start that fails says why in an ``EngineStartError``; a guard not as asked is a
``GuardRefused`` (the same environment would be refused again: the pool starts it no more).
"""

from __future__ import annotations

import os

from ...contract.guardfiles import CoreReady, read_core_ready
from ...contract.names import GUARD_ENV
from ...logic import releases
from ...logic.planning.engines import GuardSpec


class EngineStartError(RuntimeError):
    """vLLM could not start an engine for this spec; the message says why."""


class GuardRefused(EngineStartError):
    """The engine core's guard is not what the engine was asked to run with (its own record says)."""


def guard_problem(asked: GuardSpec | None, ready: CoreReady) -> str | None:
    """Why the guard in the engine core is not the one asked for, in one line, or None.

    ``ready`` is the engine core's own start-up record: asked for the guard, it must
    be on with the policy and ``hang_s`` asked for; not asked, it must be off.
    """
    core = f"{releases.ENGINE_CORE_TITLE} (pid {ready.pid})"
    if asked is None:
        if ready.guard or ready.asked:
            return (
                f"the guard was not asked for, but {core} saw {GUARD_ENV} set "
                f"({'on' if ready.guard else 'refused'}): the harness's engines must not inherit it"
            )
        return None
    want = (f"{asked.source or 'this engine'} asked for the guard (policy {asked.policy!r}, "
            f"hang_s {asked.hang_s:g} s)")
    if not ready.guard:
        why = ready.problem or f"{GUARD_ENV} did not reach it"
        return f"the guard is off: {want}, and {core} refused it: {why}"
    if ready.policy != asked.policy or ready.hang_s != asked.hang_s:
        return (f"the guard is not as asked: {want}, but {core} runs it with policy {ready.policy!r}, "
                f"hang_s {ready.hang_s:g} s")
    return None


def guard_refusal(run_dir: str, asked: GuardSpec | None) -> str | None:
    """``guard_problem`` by the engine core's record in ``run_dir`` (None while it wrote none)."""
    ready = read_core_ready(run_dir)
    return None if ready is None else guard_problem(asked, ready)


def check_core_ready(run_dir: str, asked: GuardSpec | None) -> None:
    """The engine core must have loaded our side of the plugin, or deadlines cannot switch;
    and its guard must be the one asked for (``guard_problem``), by its own record."""
    if read_core_ready(run_dir) is None:
        raise EngineStartError(
            "vLLM's engine core did not load the enginedead plugin (its vllm.general_plugins "
            f"entry); is VLLM_PLUGINS={os.environ.get('VLLM_PLUGINS')!r} leaving it out?"
        )
    problem = guard_refusal(run_dir, asked)
    if problem:
        raise GuardRefused(problem)
