"""What ``VLLM::EngineCore`` differs in between releases: the executor's RPC and its reply wait.
"""

from __future__ import annotations

from typing import Any

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


def executor_workers(executor: Any) -> list[tuple[int, int]]:
    """(global rank, pid) of each worker of a ``MultiprocExecutor``: ``workers[i]`` is local rank
    i, a ``WorkerProcHandle`` with ``rank`` and ``proc`` (0.27.1-0.32.0)."""
    found = []
    for i, handle in enumerate(getattr(executor, "workers", None) or ()):
        pid = getattr(getattr(handle, "proc", None), "pid", None)
        rank = getattr(handle, "rank", i)
        if isinstance(pid, int):
            found.append((rank if isinstance(rank, int) else i, pid))
    return found


def executor_node(executor: Any) -> int:
    """The node an executor runs on (``parallel_config.node_rank``; the head is 0; 0.27.1-0.32.0)."""
    try:
        node = executor.parallel_config.node_rank
    except AttributeError:
        return 0
    return node if isinstance(node, int) and not isinstance(node, bool) and node >= 0 else 0


def executor_engine(executor: Any) -> int:
    """The data-parallel rank of the engine an executor serves (``parallel_config.data_parallel_rank``;
    0 without data parallelism; 0.27.1-0.32.0)."""
    try:
        rank = executor.parallel_config.data_parallel_rank
    except AttributeError:
        return 0
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else 0
