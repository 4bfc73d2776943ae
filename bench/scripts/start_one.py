"""One engine start and stop, timed in a fresh process (vLLM's import excluded).

    python bench/scripts/start_one.py harness|bare|bare-1gib

``harness``: the harness's ``Engine``; ``bare``: ``vllm.LLM`` with the same arguments,
environment and KV cache; ``bare-1gib``: the same with the fixed 1 GiB every harness engine
got before 2026-12-03.  Prints one JSON line: mode, start_s, stop_s.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

from pytest_enginedead.compat import llm_api, llm_config
from pytest_enginedead.harness.engines.environment import kv_cache
from pytest_enginedead.harness.engines.offline import Engine
from pytest_enginedead.logic import releases
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.planning.engines import DeadlineAndFaults, EngineSpec


def harness(spec: EngineSpec) -> tuple[float, float]:
    t0 = time.monotonic()
    with Engine(spec).start(DeadlineAndFaults(300.0, "bench")) as engine:
        started = time.monotonic() - t0
        t1 = time.monotonic()
        engine.stop()
    return started, time.monotonic() - t1


def bare(spec: EngineSpec, sized: bool) -> tuple[float, float]:
    from vllm import LLM

    os.environ.update(llm_config.engine_environment())
    os.environ[releases.DEADLINE_ENV] = releases.deadline_env_value(300.0)
    ipc = tempfile.mkdtemp(prefix="ed-ipc-")  # vLLM's sockets and temp files, removed below
    os.environ.update(llm_config.scratch_environment(ipc, os.environ))
    kwargs = llm_config.llm_kwargs(BUNDLED_MODEL, 8)
    if sized:  # the KV cache the harness asks for: the same engine
        env, args = kv_cache(spec)
        os.environ.update(env)
        kwargs.update(args)
    else:
        os.environ[llm_config.KV_CACHE_ENV] = "1"
    try:
        t0 = time.monotonic()
        llm = LLM(**kwargs)
        started = time.monotonic() - t0
        t1 = time.monotonic()
        llm_api.shutdown_llm(llm)
        return started, time.monotonic() - t1
    finally:
        shutil.rmtree(ipc, ignore_errors=True)


def main(mode: str) -> None:
    from vllm import LLM  # noqa: F401  (imported first: vLLM's import is not what is measured)

    spec = EngineSpec(BUNDLED_MODEL, 8)
    started, stopped = harness(spec) if mode == "harness" else bare(spec, sized=mode == "bare")
    print(json.dumps({"mode": mode, "start_s": started, "stop_s": stopped}))


if __name__ == "__main__":
    main(sys.argv[1])
