"""Two engines of one model side by side in one process, one started with the allocator and
OpenMP preloads and one without, their decode steps timed in alternating rounds.

    python bench/scripts/preload_pair.py MODEL N TOKENS ROUNDS MODES PRELOAD

MODES is the engines in start order, e.g. ``with,without``; ``with`` starts its engine with
``LD_PRELOAD=PRELOAD`` (tcmalloc and iomp, as vLLM's CPU documentation serves), ``without``
with ``LD_PRELOAD`` empty.  The engines' processes inherit it (vLLM spawns them); each
engine's processes are read back in ``/proc/PID/maps`` to say which libraries they loaded.

Each round runs one concurrent decode batch of N sequences (4-token prompts) for TOKENS
tokens on each engine, the order flipping every round.  A step's time is the worker's own
record of it (its ``execute_model`` plus ``sample_tokens``): the decode steps of N sequences
(one token each; the prefill of the prompts carries 4 N tokens and is left out).  Prints one
JSON line: the modes, per engine the step times, the rounds' walls per token and what its
processes mapped.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

from pytest_enginedead.harness.engines.offline import Engine
from pytest_enginedead.logic.planning.engines import DeadlineAndFaults, EngineSpec
from pytest_enginedead.pytest_plugin.handles import EngineHandle

#: what a process's maps are searched for: the preloads and the OpenMP runtime torch links
LIBRARIES = ("libtcmalloc", "libiomp5", "libgomp")


class Preloads(Engine):
    """The harness's engine, its processes started with ``LD_PRELOAD`` as given ("" = none)."""

    def __init__(self, spec: EngineSpec, ld_preload: str) -> None:
        super().__init__(spec)
        self.ld_preload = ld_preload

    def environment(self, first: DeadlineAndFaults) -> dict[str, str]:
        return {**super().environment(first), "LD_PRELOAD": self.ld_preload}


def mapped(pid: int) -> list[str]:
    """Which of ``LIBRARIES`` the process has mapped."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            text = f.read()
    except OSError:
        return []
    return [lib for lib in LIBRARIES if lib in text]


def decode_steps(handle: EngineHandle, since: float, n: int) -> list[float]:
    """The decode steps of ``n`` sequences the worker recorded since ``since``."""
    return [s.seconds for s in handle.step_times() if s.started >= since and s.seconds is not None
            and s.batch_size == n and s.tokens == n]


def main(model: str, n: int, tokens: int, rounds: int, modes: list[str], preload: str) -> dict[str, Any]:
    engines: list[Engine] = []
    handles: list[EngineHandle] = []
    starts: list[float] = []
    with contextlib.ExitStack() as running:
        for i, mode in enumerate(modes):
            instructions = DeadlineAndFaults(300.0, f"bench {i}")
            t0 = time.monotonic()
            started = running.enter_context(
                Preloads(EngineSpec(model, n), preload if mode == "with" else "").start(instructions))
            engines.append(started)
            starts.append(time.monotonic() - t0)
            handles.append(EngineHandle(started, n, instructions))
        maps = [{str(pid): mapped(pid) for pid in engine.pids} for engine in engines]
        for handle in handles:
            handle.generate(n, max_tokens=4)  # warm-up
        steps: list[list[float]] = [[] for _ in handles]
        walls: list[list[float]] = [[] for _ in handles]
        for r in range(rounds):
            for i in (range(len(handles)) if r % 2 == 0 else reversed(range(len(handles)))):
                since = time.monotonic()
                handles[i].generate(n, max_tokens=tokens)
                walls[i].append((time.monotonic() - since) / tokens)
                steps[i].extend(decode_steps(handles[i], since, n))
    return {"model": os.path.basename(model.rstrip("/")), "batch": n, "tokens": tokens, "rounds": rounds,
            "modes": modes, "ld_preload": preload, "start_s": starts, "steps_s": steps, "walls_s": walls,
            "mapped": maps}


if __name__ == "__main__":
    out = main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split(","),
               sys.argv[6])
    print(json.dumps(out))
