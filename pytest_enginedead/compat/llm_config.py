"""How the harness configures a vLLM engine in every release: its arguments and its environment.

Nothing here imports vLLM: planning and the checks read these without loading it.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any

from ..logic.planning.engines import DEFAULT_MAX_MODEL_LEN as DEFAULT_MAX_MODEL_LEN
from ..logic.releases import MULTIPROCESSING_ENV, Version, as_version


def llm_kwargs(model: str, max_num_seqs: int, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Engine arguments for a weightless CPU engine on ``model``.

    ``gpu_memory_utilization`` is the share of host RAM for the KV cache on CPU;
    the default 0.92 fails on a shared machine.  ``enforce_eager`` skips the dynamo
    trace that otherwise makes the first step ~1.7 s on the tiny model: a first step
    slower than a short deadline would be a death the test did not ask for.
    """
    kwargs: dict[str, Any] = {
        "model": model,
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "max_num_seqs": max_num_seqs,
        "gpu_memory_utilization": 0.1,
        "max_model_len": DEFAULT_MAX_MODEL_LEN,
        "enforce_eager": True,
        "disable_log_stats": True,
    }
    kwargs.update(extra or {})
    return kwargs


#: Never phone home: vLLM's usage statistics off, no hub lookups.
#: where vLLM puts its ZeroMQ ``ipc://`` sockets (default: the temp dir, where a stopped engine
#: leaves them behind); the harness points it into the engine's run directory, removed with it.
RPC_BASE_ENV = "VLLM_RPC_BASE_PATH"

#: a socket's path is ``<base>/<uuid4>`` and must fit a Unix socket address (107 bytes)
RPC_BASE_MAX_LEN = 107 - 1 - 36

#: the temp dir of an engine's processes.  vLLM leaves files there that outlive the engine
#: (0.32.0: the torch.distributed rendezvous ``<tmp>/vllm_dist_<uuid>`` of
#: ``get_file_store_init_method``, one per start, never removed; a day of runs left 173)
TMPDIR_ENV = "TMPDIR"

#: torch's compile cache, by default in the temp dir: kept there, so engines still share it
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def scratch_environment(directory: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Where an engine's processes put what they leave: ``directory``, removed after them.

    Their temp dir and vLLM's ipc sockets go there; torch's compile cache stays where it
    would have been for ``environ``.  A ``directory`` too long for a socket's path keeps
    the sockets where ``environ`` has them (its ``VLLM_RPC_BASE_PATH``, else the temp dir).
    """
    here = tempfile.gettempdir()
    return {
        TMPDIR_ENV: directory,
        INDUCTOR_CACHE_ENV: environ.get(INDUCTOR_CACHE_ENV) or os.path.join(here, f"torchinductor_{_user()}"),
        RPC_BASE_ENV: directory if len(directory) <= RPC_BASE_MAX_LEN else environ.get(RPC_BASE_ENV) or here,
    }


def _user() -> str:
    """The user name as torch writes it into its default compile cache's path."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = str(os.getuid())
    return re.sub(r'[\\/:*?"<>|]', "_", name)


OFFLINE_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}


def engine_environment() -> dict[str, str]:
    """Variables every harness engine starts with, whatever the caller's environment."""
    env = {
        **OFFLINE_ENV,
        MULTIPROCESSING_ENV: "1",  # the deadline only exists in multiprocess mode
        "VLLM_CPU_CI_ENV": "1",  # skip the warm-up pass
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        # quiet unless the user asks for more; vLLM reads it when first imported
        "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
    }
    return env


#: vLLM's CPU KV cache in whole GiB; the CPU platform reads it and it overrides ``KV_CACHE_ARG``
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"

#: the engine argument (bytes) the CPU worker sizes its KV cache by (``--kv-cache-memory-bytes``)
KV_CACHE_ARG = "kv_cache_memory_bytes"

#: from when the CPU platform takes ``KV_CACHE_ARG`` (read in 0.27.1's and 0.32.0's
#: ``platforms/cpu.py`` and ``v1/worker/cpu_worker.py``); before, only ``KV_CACHE_ENV``
KV_CACHE_BYTES_SINCE: Version = (0, 27, 0)


def kv_cache_in_bytes(version: str | Version | None) -> bool:
    """Whether this vLLM sizes a CPU engine's KV cache by ``KV_CACHE_ARG``."""
    return as_version(version) >= KV_CACHE_BYTES_SINCE
