"""Starting and driving a ``vllm.LLM`` (and its processes) the same way in every release.

vLLM is imported inside the functions that need it, never at module import.
"""

from __future__ import annotations

import dataclasses
import functools
import getpass
import inspect
import os
import re
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .versions import MULTIPROCESSING_ENV, Version, as_version

#: The context length harness engines and servers start with, unless ``max_model_len`` is given.
DEFAULT_MAX_MODEL_LEN = 512


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


def shutdown_llm(llm: Any) -> None:
    """Ask an ``LLM`` to stop its engine processes (best effort, any release)."""
    engine = getattr(llm, "llm_engine", None)
    client = getattr(engine, "engine_core", None)
    for target in (client, engine, llm):
        stop = getattr(target, "shutdown", None)
        if callable(stop):
            stop()
            return


def quiet_repr(llm: Any) -> None:
    """Make ``repr(llm)`` local.

    ``LLM.__repr__`` (0.27 on) asks the workers for a model summary over RPC.  When
    pytest formats a traceback that passes through ``LLM.generate`` (Ctrl-C, a
    pytest-timeout cut) it reprs ``self``, and that RPC waits forever on an engine
    whose worker is busy or gone.  vLLM caches the text in ``_cached_repr``.
    """
    if hasattr(llm, "_cached_repr"):
        model = getattr(getattr(llm, "model_config", None), "model", "?")
        llm._cached_repr = f"LLM(model={model!r})"


@functools.lru_cache(maxsize=1)
def engine_argument_names() -> frozenset[str] | None:
    """The keyword arguments ``vllm.LLM(...)`` takes, or None where this vLLM cannot say.

    ``LLM.__init__`` names some itself and hands the rest to ``EngineArgs`` (a
    dataclass, 0.27.1-0.32.0), whose constructor refuses any other name.
    """
    try:
        with warnings.catch_warnings():  # what importing vLLM warns of is not the test's
            warnings.simplefilter("ignore")
            from vllm.engine.arg_utils import EngineArgs
            from vllm.entrypoints.llm import LLM
    except Exception:
        return None
    names = {f.name for f in dataclasses.fields(EngineArgs)}
    names |= {
        name for name, p in inspect.signature(LLM.__init__).parameters.items()
        if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }
    return frozenset(names)


def sampling_params(max_tokens: int) -> Any:
    """Decode exactly ``max_tokens`` tokens per sequence, greedily, no detokenizing.

    Greedy on purpose: with random sampling, vLLM 0.27.1-0.31.0 run the CPU sampler's
    ``compiled_random_sample`` (``@torch.compile``, inductor; v1/sample/ops/
    topk_topp_sampler.py) in the worker's first ``sample_tokens`` call, whatever
    ``enforce_eager`` says: a C++ compile of 2-10 s that outlives a short deadline
    before the test's own step runs.  All-greedy batches return from
    ``Sampler.sample`` before that sampler in every release; 0.32.0 dropped it.
    """
    from vllm import SamplingParams

    return SamplingParams(
        max_tokens=max_tokens, ignore_eos=True, detokenize=False, temperature=0.0
    )


def token_prompt(token_ids: list[int]) -> Any:
    """A prompt given as token ids (the engine has no tokenizer)."""
    return {"prompt_token_ids": token_ids}


def generate_arriving(llm: Any, prompts: list[Any], params: Any, per_step: int | Sequence[int]) -> list[Any]:
    """Like ``llm.generate``, but ``per_step`` requests arrive before each engine step.

    As under a server's clients, the decode batch grows while each step prefills only
    the newcomers.  A sequence gives the count per step (its last repeats), so a test can
    shape one step: ``[8, 120]`` makes the second step 8 decodes beside 120 newcomers.
    ``LLMEngine.add_request(request_id, prompt, params)`` / ``step()`` /
    ``has_unfinished_requests()`` are the same in 0.27.1-0.32.0.
    """
    engine = llm.llm_engine
    tag = f"enginedead-{id(prompts):x}-{time.monotonic_ns()}"
    counts = [per_step] if isinstance(per_step, int) else list(per_step)
    waiting = list(enumerate(prompts))
    done: dict[str, Any] = {}
    step = 0
    while waiting or engine.has_unfinished_requests():
        k = counts[min(step, len(counts) - 1)]
        for i, prompt in waiting[:k]:
            engine.add_request(f"{tag}-{i}", prompt, params)
        waiting = waiting[k:]
        step += 1
        for out in engine.step():
            if getattr(out, "finished", False):
                done[out.request_id] = out
    return [done[f"{tag}-{i}"] for i in range(len(prompts))]


def drive(llm: Any, waves: list[tuple[list[list[int]], Any]]) -> None:
    """Send waves of token-id prompts; each wave once every earlier request has its first token.

    As ``generate_arriving``: ``LLMEngine.add_request`` / ``step()`` /
    ``has_unfinished_requests()`` (0.27.1-0.32.0).  The engine core schedules on its
    own; a wave sent between two steps is scheduled together in the next one.
    """
    engine = llm.llm_engine
    tag = f"enginedead-drive-{time.monotonic_ns()}"
    pending = list(waves)
    sent: set[str] = set()
    started: set[str] = set()
    count = 0
    while pending or engine.has_unfinished_requests():
        if pending and sent <= started:
            prompts, params = pending.pop(0)
            for prompt in prompts:
                request_id = f"{tag}-{count}"
                count += 1
                engine.add_request(request_id, token_prompt(prompt), params)
                sent.add(request_id)
            continue
        for out in engine.step():
            outputs = getattr(out, "outputs", None)
            if getattr(out, "finished", False) or (outputs and outputs[0].token_ids):
                started.add(out.request_id)


def output_token_ids(request_output: Any) -> list[int]:
    return list(request_output.outputs[0].token_ids)
