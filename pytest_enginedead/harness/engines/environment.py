"""The environment an engine's processes start with: set for them alone, before vLLM starts.

vLLM freezes its variables in its processes at start, so the deadline, the run directory,
the guard and the KV cache's size travel here; the guard's variables a caller's shell
exports are cleared unless the engine asked for the guard.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from ...compat import llm_config, versions
from ...contract.names import (
    ENV_DIR,
    ENV_HARNESS_PID,
    GUARD_ENV,
    GUARD_HANG_ENV,
    GUARD_PATH_ENV,
    GUARD_POLICY_ENV,
    GUARD_VARIABLES,
)
from ...logic import releases
from ...logic.planning.engines import DeadlineAndFaults, EngineSpec
from ...logic.planning.ranks import BIND_ENV, binding, parse_cpu_list
from ...logic.sizing import slices


def engine_environment(spec: EngineSpec, run_dir: str, first: DeadlineAndFaults) -> dict[str, str]:
    """The variables the engine's processes start with (and only they).

    The harness sets the guard for every engine: on as its spec says, else
    ``ENGINEDEAD_GUARD=0`` and none of the guard's other variables
    (``cleared_variables``), whatever the caller's environment holds.
    """
    env = {
        **llm_config.engine_environment(),
        releases.DEADLINE_ENV: first.deadline_env,
        ENV_DIR: run_dir,
        ENV_HARNESS_PID: str(os.getpid()),
        GUARD_ENV: "0",
    }
    env.update(llm_config.scratch_environment(run_dir, os.environ))  # removed with the run dir
    if spec.ranks > 1:
        if BIND_ENV not in os.environ:  # the user's own binding wins
            env[BIND_ENV] = binding(owned_cores(spec), spec.ranks)
    elif spec.cpu_bind is not None:
        env[BIND_ENV] = spec.cpu_bind
    if spec.pipeline_parallel > 1:
        env["VLLM_CPU_CI_ENV"] = "0"  # the warm-up allocates what a pipeline stage's first step needs
    env.update(kv_cache(spec)[0])
    if spec.guard is not None:
        env[GUARD_ENV] = "1"
        env[GUARD_HANG_ENV] = repr(spec.guard.hang_s)
        env[GUARD_POLICY_ENV] = spec.guard.policy
        env[GUARD_PATH_ENV] = os.pathsep.join([*sys.path[:1], os.getcwd()])
    return env


def owned_cores(spec: EngineSpec) -> list[int]:
    """The cores this engine may use: its xdist budget (``cpu_bind``), else this process's affinity."""
    if spec.cpu_bind is not None:
        return parse_cpu_list(spec.cpu_bind)
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def engine_arguments(spec: EngineSpec) -> dict[str, Any]:
    """What the engine is started with beyond the harness's defaults: the spec's own arguments,
    its ranks, and the KV cache's size."""
    args: dict[str, Any] = {**dict(spec.extra_args), **spec.rank_args(), **kv_cache(spec)[1]}
    if spec.pipeline_parallel > 1:  # vLLM's CPU pipeline stages need their warm-up (compiled)
        args["enforce_eager"] = False
    return args


def kv_cache(spec: EngineSpec) -> tuple[dict[str, str], dict[str, int]]:
    """How the KV cache is sized: (environment, engine arguments) to start with.

    Given, it is the spec's whole GiB, the user's ``VLLM_CPU_KVCACHE_SPACE`` (inherited)
    or their ``kv_cache_memory_bytes``.  Else what this engine's sequences can fill
    (``slices.kv_cache_bytes``, at most the 1 GiB the harness always gave): the cache is
    allocated at start, where 1 GiB took ~3 s of a 2-core box's engine start.  A vLLM
    or a model config it cannot be sized for gets 1 GiB.
    """
    if spec.kv_cache_gib is not None:
        return {llm_config.KV_CACHE_ENV: str(spec.kv_cache_gib)}, {}
    if llm_config.KV_CACHE_ENV in os.environ or llm_config.KV_CACHE_ARG in dict(spec.extra_args):
        return {}, {}
    length = spec.max_model_len
    if length is not None and llm_config.kv_cache_in_bytes(versions.installed_version()):
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, KeyError):
            with open(os.path.join(spec.model, "config.json")) as f:
                config = json.load(f)
            size = slices.kv_cache_bytes(config, spec.max_num_seqs, length)
            return {}, {llm_config.KV_CACHE_ARG: size}
    return {llm_config.KV_CACHE_ENV: "1"}, {}


def cleared_variables(spec: EngineSpec) -> list[str]:
    """The guard's variables the engine's processes must not inherit (none of them set here)."""
    if spec.guard is not None:
        return []  # all of them set by ``engine_environment``
    return [name for name in GUARD_VARIABLES if name != GUARD_ENV]


def process_environment(env: Mapping[str, str], spec: EngineSpec, base: Mapping[str, str]) -> dict[str, str]:
    """A whole environment for the engine's processes: ``base`` less the cleared, plus ``env``."""
    cleared = set(cleared_variables(spec))
    return {**{k: v for k, v in base.items() if k not in cleared}, **env}
