"""The ``vllm.general_plugins`` entry: what pytest-enginedead does in vLLM's own processes.

vLLM calls ``register()`` once in every process it runs: the process that builds
the engine (the harness's own, or the API server), ``VLLM::EngineCore`` and each
``VLLM::Worker``.  Each side is inert unless asked: the worker side (``worker.py``)
when the harness set a run directory (and the marks of its collectives, ``collectives.py``,
then or under the guard; and dummy weights that keep a deep model's activations alive,
``dummyweights.py``), the engine-core side (``guard.py``) when the
harness set one or ``ENGINEDEAD_GUARD=1`` (or ``ENGINEDEAD_METRICS=1``) is set, the serving side
(``exiting.py``) when the guard or ``ENGINEDEAD_EXIT_ON_DEATH=1`` is set, and its figures on vLLM's
``/metrics`` (``scrape.py``) with the guard or ``ENGINEDEAD_METRICS=1``.  Nothing runs in the harness's
own process.

Under the harness the engine core also leaves the harness's process group (its workers,
spawned after this, go with it): a Ctrl-C in the terminal then reaches pytest alone,
which stops the engine by pid, instead of killing the engine under a running test that
would report a death nobody caused.
"""

from __future__ import annotations

import contextlib
import json
import os

from .contract.guardfiles import state_dir
from .contract.names import ENV_DIR, ENV_HARNESS_PID, PATCHES_ENV
from .logic.inputs.guardconfig import guard_asked, metrics_from_env
from .vllm_plugin import collectives, dummyweights, exiting, guard, scrape, worker


def register() -> None:
    if os.environ.get(ENV_HARNESS_PID) == str(os.getpid()):
        return
    if os.environ.get(ENV_DIR) and guard.in_engine_core():
        _leave_process_group()
    worker.register()
    dummyweights.register()  # a deep dummy model costs what a checkpoint would
    if os.environ.get(ENV_DIR) or guard_asked(os.environ) or metrics_from_env(os.environ)[0]:
        collectives.install(state_dir(os.environ))  # a rank waiting for its peer is told apart
    guard.register()
    exiting.register()
    scrape.register()  # after exiting's: the serving process has named itself to its engine cores
    path = os.environ.get(PATCHES_ENV)
    if path and guard.in_engine_core():
        with open(path, "w") as f:
            json.dump(guard.patched(), f)


def _leave_process_group() -> None:
    """Lead a process group of our own, unless we lead one already (the API server's session)."""
    with contextlib.suppress(OSError):
        if os.getpgid(0) != os.getpid():
            os.setpgid(0, 0)
