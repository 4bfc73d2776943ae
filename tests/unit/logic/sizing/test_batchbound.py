"""How large a batch a harness engine can run: what vLLM builds (``max_num_batched_tokens``) and
what this machine holds (weights, the KV cache the harness gives, the runtime)."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.sizing import batchbound, slices

TINY = json.loads((Path(BUNDLED_MODEL) / "config.json").read_text())
GIB = slices.GIB


def test_vllms_defaults_bound_the_batch_unless_the_engine_arguments_say_otherwise() -> None:
    """vLLM refuses max_num_seqs above max_num_batched_tokens; the harness leaves the latter at
    vLLM's CPU default: 4096 offline, 2048 served, per rank, doubled in throughput mode, at least
    max_model_len without chunked prefill; the engine arguments' own value wins."""
    assert batchbound.tokens_bound(False, {}, 512).largest == 4096
    assert batchbound.tokens_bound(True, {}, 512).largest == 2048
    assert batchbound.tokens_bound(False, {"tensor_parallel_size": 2}, 512).largest == 8192
    assert batchbound.tokens_bound(True, {"performance_mode": "throughput"}, 512).largest == 4096
    assert batchbound.tokens_bound(True, {"enable_chunked_prefill": False}, 4096).largest == 4096
    assert batchbound.tokens_bound(True, {"max_num_batched_tokens": 64}, 512).largest == 64
    bound = batchbound.tokens_bound(False, {}, 512)
    assert bound.problem(4096) is None
    assert bound.problem(4097) == (
        "batch size 4097 is over 4096, the largest an offline engine takes: vLLM refuses max_num_seqs above "
        "max_num_batched_tokens (4096, vllm.LLM's on CPU default; a factory's max_num_batched_tokens= raises "
        "it)")
    assert (bound.problem(5000, said="batch_size=5000") or "").startswith("batch_size=5000 is over 4096")


def test_the_machine_bounds_the_batch_only_when_the_kv_caches_cap_does_not() -> None:
    """The harness gives an engine at most 1 GiB of KV cache: with that and the model within the
    memory available, no batch is too large; with less room, the KV cache of each sequence counts;
    a model that does not fit holds no batch at all."""
    need = slices.weight_bytes(TINY) + slices.RUNTIME_BYTES
    assert batchbound.memory_bound(TINY, 512, need + 2 * GIB) is None
    per = slices.kv_bytes(TINY, [512]) * 1.5
    tight = batchbound.memory_bound(TINY, 512, need + int(10.5 * per))
    assert tight is not None and tight.largest == 10
    assert tight.problem(10) is None
    assert (tight.problem(11) or "").startswith(
        "batch size 11 is over 10, the largest this machine holds: 11 sequences of 512 tokens need ")
    none = batchbound.memory_bound(TINY, 512, need // 2)
    assert none is not None and none.largest == 0
    assert "the largest this machine holds: one sequence of 512 tokens needs" in (none.problem(1) or "")
    assert batchbound.memory_bound({"architectures": ["LlamaForCausalLM"]}, 512, 1) is None  # not sizable


def test_the_kv_cache_of_a_huge_batch_is_sized_without_a_list_per_sequence() -> None:
    """10**11 sequences: the cap, at once (a list of 10**11 contexts was a MemoryError)."""
    assert slices.kv_cache_bytes(TINY, 10**11, 512) == slices.KV_CACHE_CAP_BYTES
    one = slices.kv_cache_bytes(TINY, 1, 512)
    assert slices.kv_cache_bytes(TINY, 2, 512) >= one
