"""``enginedead doctor`` run as a user runs it: one line per check, exit 0 or 1, in seconds, and no
engine started — the command's process imports neither vLLM nor torch, and no ``VLLM::``
process appears under it (its one child imports transformers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_enginedead.compat import versions
from pytest_enginedead.logic import machine as fingerprint
from pytest_enginedead.logic.inputs.modelconfig import presets, read_config
from pytest_enginedead.logic.sizing import shapes, slices
from tests.support.badinput import FIXTURES

needs_vllm = pytest.mark.skipif(versions.installed_version() is None, reason="needs vLLM installed")

#: the checks, in the order a person fixes them (``--model`` adds ``memory`` after ``isa``)
CHECKS = ["vllm", "torch", "transformers", "requirements", "isa", "preloads", "omp", "plugin", "deadline"]
#: what a shell may hold that changes the verdict: each test sets what it plants
PLANTABLE = ("VLLM_PLUGINS", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "VLLM_ENABLE_V1_MULTIPROCESSING",
             "OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND", "ENGINEDEAD_POLICY")
#: "in seconds": importing transformers (and torch) in its own process is most of it; a loaded
#: 2-core box took ~6 s
LIMIT_S = 60.0

#: runs the command in this process while a thread notes every process below it
WATCHED = r"""
import json, sys, threading, time
import psutil
from pytest_enginedead.command import main
me, seen, below, done = psutil.Process(), set(), set(), threading.Event()
mine = " ".join(me.cmdline())  # a child between its fork and its exec still shows this
def watch():
    while not done.is_set():
        for p in me.children(recursive=True):
            try:  # a child may be gone, or not yet readable
                cmd, direct = " ".join(p.cmdline()), p.ppid() == me.pid
            except psutil.Error:
                continue
            if cmd and cmd != mine:
                (seen if direct else below).add(cmd)
        time.sleep(0.02)
threading.Thread(target=watch, daemon=True).start()
code = main(sys.argv[1:])
done.set()
loaded = sorted(m for m in ("vllm", "torch", "pytest", "_pytest") if m in sys.modules)
print("WATCHED " + json.dumps({"code": code, "loaded": loaded, "children": sorted(seen),
                              "below": sorted(below)}))
"""


def doctor(*args: str, **env: str) -> tuple[list[str], dict[str, Any], float]:
    """``enginedead doctor ARGS`` with ``env`` planted: its lines, what was watched, its wall."""
    environ = {k: v for k, v in os.environ.items()
               if k not in PLANTABLE and not k.startswith("ENGINEDEAD_GUARD")}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", WATCHED, "doctor", *args], env={**environ, **env},
                          capture_output=True, text=True, timeout=300, check=False)
    wall = time.monotonic() - t0
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines and lines[-1].startswith("WATCHED "), done.stdout + done.stderr
    watched = json.loads(lines[-1].removeprefix("WATCHED "))
    assert done.stderr == "", done.stderr
    return lines[:-1], watched, wall


def assert_no_engine(watched: dict[str, Any], wall: float) -> None:
    assert watched["loaded"] == []  # vLLM, torch, pytest: none in the command's own process
    assert not [c for c in watched["children"] + watched["below"] if "VLLM::" in c], watched
    # its own children (theirs, such as a `file -b` a library runs, are theirs): transformers'
    # import, and for a MoE model vLLM's kernel checks
    assert all(c.endswith("-c import transformers") or "compat import moe" in c
               for c in watched["children"]), watched["children"]
    assert wall < LIMIT_S


@pytest.mark.processes
@needs_vllm
def test_doctor_passes_on_this_install_and_starts_no_engine() -> None:
    lines, watched, wall = doctor()
    assert watched["code"] == 0, lines
    assert [ln.split()[1].rstrip(":") for ln in lines] == CHECKS
    assert all(ln.split()[0] in ("ok", "warn") for ln in lines), lines
    assert "ok    plugin: the enginedead vllm.general_plugins entry loads in vLLM's processes" in lines
    assert "ok    deadline: 300 s per step RPC (vLLM's default)" in lines
    # `pip check` lists the CUDA extras the install removed: doctor says they are expected
    (requirements,) = [ln for ln in lines if " requirements: " in ln]
    assert requirements.startswith("ok    requirements: "), requirements
    assert_no_engine(watched, wall)


@pytest.mark.processes
def test_a_plugin_list_without_enginedead_fails_with_the_fix() -> None:
    lines, watched, wall = doctor(VLLM_PLUGINS="lora")
    assert watched["code"] == 1
    (line,) = [ln for ln in lines if " plugin: " in ln]
    assert line.startswith("fail  plugin: VLLM_PLUGINS='lora'") and "leaves out enginedead" in line
    assert line.endswith("; fix: export VLLM_PLUGINS=lora,enginedead (or unset it)")
    if versions.installed_version() is not None:  # the plant is the only failure
        assert [ln.split()[1] for ln in lines if ln.startswith("fail")] == ["plugin:"]
    assert_no_engine(watched, wall)


@pytest.mark.processes
def test_a_deadline_vllm_cannot_use_fails() -> None:
    lines, watched, _ = doctor(VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS="soon")
    assert watched["code"] == 1
    (line,) = [ln for ln in lines if ln.startswith("fail  deadline:")]
    assert line.endswith("; fix: unset VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS")


@pytest.mark.processes
def test_json_carries_the_same_findings_and_the_exit() -> None:
    lines, watched, _ = doctor("--json", VLLM_PLUGINS="lora")
    data = json.loads("\n".join(lines))
    assert watched["code"] == data["exit"] == 1
    assert {"status": "fail", "check": "plugin"}.items() <= next(
        f for f in data["findings"] if f["check"] == "plugin").items()
    assert all(set(f) == {"status", "check", "what", "fix"} for f in data["findings"])


@pytest.mark.processes
@pytest.mark.parametrize("model", ["tiny-llama", "gemma-4-26b-a4b"])
def test_a_model_by_name_adds_its_memory_check(model: str) -> None:
    """The preset by name; its dummy weights and one full-length sequence's KV cache against the
    memory available: the 26B (~57 GiB) does not fit a 24 GiB box, and the fix is its slices."""
    config = read_config(Path(presets()[model]) / "config.json")
    need = slices.memory(config, slices.kv_cache_gib(config, [shapes.model_max_len(config) or 2048])).total
    available = fingerprint.meminfo("MemAvailable")
    if available / 2 < need < available * 2:
        pytest.skip(f"{model} needs {need / 2**30:.1f} GiB, about what is available here: no clear verdict")
    lines, watched, wall = doctor("--model", model)
    (line,) = [ln for ln in lines if " memory: " in ln]
    checks = [ln.split()[1].rstrip(":") for ln in lines]
    isa = CHECKS.index("isa") + 1
    expected = [*CHECKS[:isa], "memory", *CHECKS[isa:]]
    if versions.installed_version() is None:  # vllm-cpu's requirements are read where it is installed
        expected.remove("requirements")
    assert [c for c in checks if c != "moe"] == expected
    assert_no_engine(watched, wall)  # a model's checks read its config: no vLLM, no torch
    if need > available:
        assert line.startswith(f"fail  memory: {model} needs ") and watched["code"] == 1
        assert line.endswith(f"fix: measure depth slices instead: enginedead calibrate --model {model} "
                             "--forecast-layers 1,2")
    else:
        assert line.startswith(f"ok    memory: {model} needs ")


@pytest.mark.processes
def test_a_model_that_is_no_model_is_one_line_and_exit_2() -> None:
    cmd = [sys.executable, "-m", "pytest_enginedead.command", "doctor", "--model", str(FIXTURES / "bad-json")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "is not valid JSON" in done.stderr
