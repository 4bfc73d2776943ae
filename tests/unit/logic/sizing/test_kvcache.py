"""The KV cache a server will have (vLLM's CPU rule, or the user's figure) and the worst step it bounds."""

from __future__ import annotations

import pytest

from pytest_enginedead.logic.sizing import kvcache, shapes
from pytest_enginedead.logic.sizing.fit import Fit
from pytest_enginedead.logic.sizing.kvcache import GIB, KvCache, KvLayout
from pytest_enginedead.logic.sizing.shapes import Chunk, Limits, StepPlan
from tests.support.sizing import TRUE, config_26b

# --- the cache's layout --------------------------------------------------------------------------


def test_layers_are_padded_to_whole_groups_as_vllm_groups_them() -> None:
    """vLLM groups each attention type's layers in groups of the smallest count: the 26B's 25 sliding
    and 5 full layers need no padding; gemma-4-moe-mini's 13 and 3 are padded to 15 and 3 (vLLM warns
    "Add 2 padding layers"); counts within 1.5x of each other group by the largest."""
    assert kvcache.padded_counts({"sliding_attention": 25, "full_attention": 5}) == {
        "sliding_attention": 25, "full_attention": 5}
    assert kvcache.padded_counts({"sliding_attention": 13, "full_attention": 3}) == {
        "sliding_attention": 15, "full_attention": 3}
    assert kvcache.padded_counts({"sliding_attention": 12, "full_attention": 13}) == {
        "sliding_attention": 13, "full_attention": 13}
    assert kvcache.padded_counts({"full_attention": 7}) == {"full_attention": 7}


def test_the_26b_cache_layout_from_its_config() -> None:
    """Full layers: 2 KV heads x 512 x K and V x bf16 = 4 KiB a token; sliding: 8 x 256 x 2 x 2 = 8 KiB."""
    lay = kvcache.kv_layout(config_26b())
    assert (lay.full, lay.sliding, lay.window) == (5 * 4096, 25 * 8192, 1024)
    # one request at the full context: every full layer holds it all, a sliding one a window and a chunk
    assert lay.held(262144, 1) == 5 * 4096 * 262144 + 25 * 8192 * 1024
    assert lay.reserve(262144, 2048) == 5 * 4096 * 262144 + 25 * 8192 * (1024 + 2048)
    assert lay.held(100, 1) == (5 * 4096 + 25 * 8192) * 128  # whole blocks of 128 tokens


# --- the cache the server will have ----------------------------------------------------------------


def test_vllms_rule_on_a_machine_that_holds_the_model() -> None:
    """No VLLM_CPU_KVCACHE_SPACE: memory x 0.92 less what the worker holds (weights and runtime)."""
    cfg = config_26b()
    cache = kvcache.server_cache(cfg, 8192, 2048, this_memory=23 * GIB, memory=128 * GIB)
    assert cache.bytes == pytest.approx(128 * GIB * 0.92 - kvcache.worker_bytes(cfg), abs=1)
    assert "--server-memory-gib" in cache.source and not cache.assumed
    half = kvcache.server_cache(cfg, 8192, 2048, this_memory=23 * GIB, memory=128 * GIB, fraction=0.5)
    assert half.bytes < cache.bytes


def test_a_model_this_machine_cannot_hold_is_served_on_the_smallest_common_memory_that_can() -> None:
    """The 26B (47 GiB of weights) at its 262K context on a 24 GiB box: vLLM's rule on 64 GiB, the
    smallest common size whose cache holds one request of max_model_len, and the answer says so."""
    cfg = config_26b()
    cache = kvcache.server_cache(cfg, 262144, 2048, this_memory=24 * GIB)
    assert cache.assumed and cache.memory_bytes == 64 * GIB and "assumed" in cache.source
    assert 1 <= cache.requests(262144, 2048) < 3
    with pytest.raises(kvcache.KvCacheError, match="give --kv-cache-tokens"):
        kvcache.server_cache({**cfg, "vocab_size": 2_000_000_000}, 262144, 2048, this_memory=24 * GIB)


def test_the_users_figures_come_first() -> None:
    """--kv-cache-tokens (as vLLM logs it) before VLLM_CPU_KVCACHE_SPACE before the rule; a cache of K
    tokens at these limits is what vLLM would log as K tokens."""
    cfg = config_26b()
    given = kvcache.server_cache(cfg, 8192, 2048, this_memory=24 * GIB, space_gib=4, tokens=100_000)
    assert given.source == "--kv-cache-tokens 100000"
    assert given.tokens(8192, 2048) == pytest.approx(100_000, rel=1e-6)
    space = kvcache.server_cache(cfg, 8192, 2048, this_memory=24 * GIB, space_gib=4)
    assert space.bytes == 4 * GIB and "VLLM_CPU_KVCACHE_SPACE=4" in space.source


def test_a_cache_vllm_would_refuse_is_refused_in_one_line() -> None:
    cfg = config_26b()
    lay = kvcache.kv_layout(cfg)
    none = KvCache(-GIB, lay, "vLLM's rule: 0.92 x 32 GiB - 48 GiB")
    assert "leaves no KV cache" in str(kvcache.cache_problem(none, 8192, 2048, "--server-memory-gib 32"))
    small = KvCache(GIB // 4, lay, "VLLM_CPU_KVCACHE_SPACE")
    problem = kvcache.cache_problem(small, 262144, 2048, "VLLM_CPU_KVCACHE_SPACE=0")
    assert problem is not None and "cannot hold one request of --max-model-len 262144" in problem
    assert "\n" not in problem
    assert kvcache.cache_problem(KvCache(64 * GIB, lay, "x"), 262144, 2048, "x") is None


# --- the heaviest step the cache lets the scheduler form ----------------------------------------------


def test_the_worst_step_holds_no_more_than_the_cache_and_says_it_binds() -> None:
    """The report's limits on a 64 GiB server: the chunk at the end of a 262K prompt stays, the decodes'
    context is cut to what the rest of the cache holds, and the answer names the cache as a limit."""
    cfg = config_26b()
    lim = Limits(128, 2048, 262144)
    cache = kvcache.server_cache(cfg, 262144, 2048, this_memory=24 * GIB)
    price = Fit(TRUE).predict
    free = shapes.worst_step(lim, 1024, price)
    bounded = shapes.worst_step(lim, 1024, price, cache)
    pool = kvcache.cache_of(lim, cache)
    assert pool is not None and pool.held(bounded) <= cache.bytes < pool.held(free)
    assert bounded.chunks == free.chunks and bounded.decodes == 127 and bounded.decode_context < 262143
    assert "kv_cache" in shapes.binding(bounded, lim, 1024, pool)
    assert "kv_cache" not in shapes.binding(free, lim, 1024, None)
    assert set(shapes.binding(free, lim, 1024, None)) == {
        "max_num_seqs", "max_num_batched_tokens", "max_model_len"}


def test_a_cache_too_small_for_every_decode_cuts_their_number() -> None:
    """Room for a few one-block decodes beside the chunk: fewer decodes, each one block."""
    lay = KvLayout(1000)
    chunk = StepPlan(10, 500, (Chunk(100, 400),))
    pool = kvcache.Pool(lay.held(500, 100) + 3 * lay.held(1, 1), lay)
    cut = kvcache.fit_kv(chunk, pool)
    assert cut is not None and cut.decodes == 3 and cut.chunks == chunk.chunks
    assert kvcache.fit_kv(chunk, kvcache.Pool(lay.held(500, 100) - 1, lay)) is None
    assert kvcache.fit_kv(chunk, None) == chunk
