"""What ``VLLM::Worker`` differs in between releases: where a step runs, what it schedules.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from ..contract.steps import attended_keys, read_keys
from .versions import Version, as_version


def worker_step_target(version: str | Version | None) -> tuple[str, str, str]:
    """(module, class, method) that runs one model step in a worker process.

    From 0.10 (V1 only) every backend's worker is driven through
    ``WorkerWrapperBase.execute_model``; V0 releases kept it under ``vllm.worker``.
    """
    v = as_version(version)
    if v >= (0, 10):
        return ("vllm.v1.worker.worker_base", "WorkerWrapperBase", "execute_model")
    return ("vllm.worker.worker_base", "WorkerWrapperBase", "execute_model")


#: where CPU ranks meet: vLLM's CPU communicator (all releases with V1 on CPU), module and class
CPU_COMMUNICATOR = ("vllm.distributed.device_communicators.cpu_communicator", "CpuCommunicator")

#: its methods in which a rank waits for its peers (those a release lacks are skipped)
CPU_COLLECTIVES = (
    "all_reduce", "gather", "all_gather", "all_gatherv", "reduce_scatter", "reduce_scatterv",
    "send", "recv", "broadcast", "send_tensor_dict", "recv_tensor_dict", "dispatch", "combine",
)


#: vLLM's loader of ``--load-format dummy`` (module, class, method): every tensor of the model,
#: persistent buffers included, drawn from U(-1e-3, 1e-3) (0.27.1-0.32.0)
DUMMY_LOADER = ("vllm.model_executor.model_loader.dummy_loader", "DummyModelLoader", "load_weights")

#: buffers that scale a layer's whole output, with the value that leaves it as it is.  Gemma-4's
#: ``layer_scalar`` (gemma4.py, every decoder layer; a checkpoint's value is of order 1): drawn at
#: +-1e-3 it shrinks the residual stream x1000 a layer, to zero by layer 11 of 16, and from there
#: every token routes to the same top-k experts (8 of 32 for 8 decodes, instead of ~29): a deep
#: dummy MoE's step then costs what no real checkpoint's does (docs/explanation/forecast.md)
NEUTRAL_BUFFERS: Mapping[str, float] = {"layer_scalar": 1.0}


def worker_sample_method(version: str | Version | None) -> str | None:
    """The second RPC of a V1 step, under the same deadline, or None (V0: one RPC).

    V1 engines send ``execute_model`` then ``sample_tokens`` (0.27.1-0.32.0:
    multiproc_executor.py, both with ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``).
    ``WorkerWrapperBase`` has no ``sample_tokens`` of its own: its ``__getattr__``
    forwards it to the backend worker.
    """
    return "sample_tokens" if as_version(version) >= (0, 10) else None


def step_tokens(scheduler_output: Any) -> int | None:
    """Tokens one V1 step processes (prefill included), or None if unknown."""
    total = getattr(scheduler_output, "total_num_scheduled_tokens", None)
    return total if isinstance(total, int) else None


def step_shape(scheduler_output: Any, window: int | None = None) -> tuple[int, int, int, int, int]:
    """(tokens, context, window context, keys read, keys read in the window) one V1 step schedules;
    -1 for what cannot be read.

    Context is summed over the step's tokens: each query attends its position's keys
    (``num_computed_tokens + i + 1``), and at most ``window`` of them in a
    sliding-window layer.  Keys read are each sequence's context once (a decode reads its
    whole context for one query; a prefill chunk reads it once for all its queries).
    ``SchedulerOutput.num_scheduled_tokens`` (req_id -> tokens),
    ``scheduled_new_reqs[].num_computed_tokens`` and ``scheduled_cached_reqs.req_ids`` /
    ``.num_computed_tokens`` are the same in 0.27.1-0.32.0.
    """
    tokens = step_tokens(scheduler_output)
    unknown = (-1 if tokens is None else tokens, -1, -1, -1, -1)
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
        read, read_capped = full, capped
        rest = new
    else:
        full = capped = read = read_capped = 0
        rest = [*zip(computed, counts, strict=True), *new]
    for done, n in rest:
        full += attended_keys(done + 1, done + n)
        capped += attended_keys(done + 1, done + n, window)
        read += done + n
        read_capped += read_keys(done + n, n, window)
    return (unknown[0], full, capped, read, read_capped)


def attention_layers(worker: Any) -> list[Any]:
    """The attention layers a worker's model runs, in the order the model registered them.

    Every attention layer registers itself (its name -> the layer) in
    ``vllm_config.compilation_config.static_forward_context`` and computes through its
    ``impl.forward(layer, query, ...)``: on CPU from inside the ``vllm.unified_attention_with_output``
    custom op, which runs Python at every layer, compiled graph or not (0.27.1-0.32.0).  Other
    entries (MoE, Mamba) have no ``impl``.
    """
    try:
        context = worker.vllm_config.compilation_config.static_forward_context
    except AttributeError:
        return []
    if not isinstance(context, Mapping):
        return []
    return [layer for layer in context.values()
            if callable(getattr(getattr(layer, "impl", None), "forward", None))]


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


def worker_rank(wrapper: Any) -> int:
    """A worker's global rank (``WorkerWrapperBase.global_rank``, else ``rpc_rank``; 0.27.1-0.32.0
    build it as ``WorkerWrapperBase(rpc_rank=local_rank, global_rank=rank)``)."""
    for name in ("global_rank", "rpc_rank"):
        rank = getattr(wrapper, name, None)
        if isinstance(rank, int):
            return rank
    return 0


def worker_node(wrapper: Any) -> int:
    """The node a worker runs on (``vllm_config.parallel_config.node_rank``: ``--node-rank``, 0 on a
    single machine; 0.27.1-0.32.0)."""
    try:
        node = wrapper.vllm_config.parallel_config.node_rank
    except AttributeError:
        return 0
    return node if isinstance(node, int) and not isinstance(node, bool) and node >= 0 else 0
