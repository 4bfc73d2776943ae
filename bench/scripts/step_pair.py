"""Two engines side by side in one process, their decode steps timed in alternating rounds.

    python bench/scripts/step_pair.py ROUNDS N TOKENS MODES

MODES is the engines in start order, e.g. ``on,off``:

- ``on``: step record + liveness sampler (``assert_no_false_death`` around each batch);
- ``off``: the ``vllm.general_plugins`` entry inert (no run directory), no sampler;
- ``guard``: step record + the guard (hang_s 60 s, reference policy), no sampler;
- ``rec``: step record alone (the guard bench's "off"), no sampler;
- ``nolayers``: step record alone, its workers without the per-layer progress hook
  (``ENGINEDEAD_LAYER_PROGRESS=0``): the layers bench's "off";
- ``nometrics``: the guard as ``guard``, its figures for ``/metrics`` off (``ENGINEDEAD_METRICS=0``):
  the metrics bench's "off".

Prints one JSON line: the modes, each engine's per-token step times, the steps each
recorded, what each engine core said at start, the guard's decisions, whether each kept figures for
``/metrics`` (its record in the metrics directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

from pytest_enginedead import assert_no_false_death
from pytest_enginedead.contract.guardfiles import core_ready_path
from pytest_enginedead.contract.metricsfile import PREFIX, metrics_dir
from pytest_enginedead.contract.names import ENV_DIR, LAYERS_ENV, METRICS_ENV
from pytest_enginedead.harness.engines.offline import Engine
from pytest_enginedead.harness.engines.reaper import Reaper
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.planning.engines import DeadlineAndFaults, EngineSpec, GuardSpec
from pytest_enginedead.pytest_plugin.handles import EngineHandle


class Inert(Engine):
    """The same engine with the ``vllm.general_plugins`` entry inert: without
    ``ENGINEDEAD_WORKER_DIR`` neither the worker side nor the engine-core side acts."""

    def environment(self, first: DeadlineAndFaults) -> dict[str, str]:
        env = super().environment(first)
        del env[ENV_DIR]
        return env

    def check_core_ready(self) -> None:
        """An inert engine core writes nothing, and has no control file to read."""


class NoLayers(Engine):
    """The same engine, its workers without the per-layer progress hook."""

    def environment(self, first: DeadlineAndFaults) -> dict[str, str]:
        return {**super().environment(first), LAYERS_ENV: "0"}


class NoMetrics(Engine):
    """The same engine, its engine core keeping no figures for ``/metrics``."""

    def environment(self, first: DeadlineAndFaults) -> dict[str, str]:
        return {**super().environment(first), METRICS_ENV: "0"}


def keeps_figures(engine: Engine, first: DeadlineAndFaults) -> bool:
    """Whether the engine core keeps a metrics record (in its environment's metrics directory)."""
    directory = metrics_dir(engine.environment(first))
    with contextlib.suppress(OSError):
        return any(name.startswith(PREFIX) for name in os.listdir(directory))
    return False


def core_says(engine: Engine) -> Any:
    """What the engine core wrote once its side of the plugin was in place (None: inert)."""
    path = core_ready_path(engine.run_dir)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def main(rounds: int, n: int, tokens: int, modes: list[str]) -> None:
    os.environ.pop(ENV_DIR, None)  # only the engines that ask get one
    engines: list[Engine] = []
    handles: list[EngineHandle] = []
    firsts: list[DeadlineAndFaults] = []
    with contextlib.ExitStack() as running:
        # ends both engines if this script is killed (the bench is stopped, or times out)
        reaper = running.enter_context(Reaper())
        for i, mode in enumerate(modes):
            guard = GuardSpec(60.0, "reference") if mode in ("guard", "nometrics") else None
            instructions = DeadlineAndFaults(300.0, f"bench {i}")
            kind = {"off": Inert, "nolayers": NoLayers, "nometrics": NoMetrics}.get(mode, Engine)
            spec = EngineSpec(BUNDLED_MODEL, n, guard=guard)
            engine = running.enter_context(kind(spec, reaper=reaper).start(instructions))
            engines.append(engine)
            firsts.append(instructions)
            handles.append(EngineHandle(engine, n, instructions))
        core = [core_says(engine) for engine in engines]  # the plugin's core side, the guard
        figures = [keeps_figures(engine, first) for engine, first in zip(engines, firsts, strict=True)]
        for handle in handles:
            handle.generate(n, max_tokens=4)  # warm-up
        times: list[list[float]] = [[] for _ in handles]
        for r in range(rounds):
            for i in (range(len(handles)) if r % 2 == 0 else reversed(range(len(handles)))):
                handle = handles[i]
                t0 = time.monotonic()
                if modes[i] == "on":
                    with assert_no_false_death(handle):  # the sampler runs meanwhile
                        handle.generate(n, max_tokens=tokens)
                else:
                    handle.generate(n, max_tokens=tokens)
                times[i].append((time.monotonic() - t0) / tokens)
        recorded = [len(engine.evidence.steps()) for engine in engines]
        guard_events = [len(engine.evidence.guard_events()) for engine in engines]
    print(json.dumps({"modes": modes, "times": times, "recorded": recorded, "core": core,
                      "guard_events": guard_events, "figures": figures}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(","))
