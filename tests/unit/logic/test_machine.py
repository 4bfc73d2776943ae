"""The machine fingerprint every JSON report carries: fabricated /proc/cpuinfo, no vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_enginedead.logic import machine as fingerprint
from pytest_enginedead.logic.machine import differences, isa_flags, same_machine, this_machine


def cpuinfo(model: str, flags: str) -> str:
    """Two processors as Linux lists them (the second's lines must not be read)."""
    one = (
        "processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: {model}\n"
        "flags\t\t: {flags}\nvmx flags\t: vnmi ept vpid\nbogomips\t: 4800.00\n\n"
    )
    return one.format(n=0, model=model, flags=flags) + one.format(n=1, model="other", flags="avx512f")


SAPPHIRE = cpuinfo(
    "Intel(R) Xeon(R) Platinum 8480+",
    "fpu sse2 avx avx2 fma avx512f avx512dq avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8",
)
ZEN2 = cpuinfo("AMD EPYC 7B12", "fpu sse2 avx avx2 fma bmi2")


def test_avx512_and_amx_flags_are_reported_sorted() -> None:
    assert isa_flags(SAPPHIRE) == [
        "amx_bf16", "amx_int8", "amx_tile", "avx2", "avx512_bf16", "avx512_vnni", "avx512f",
    ]


def test_an_avx2_only_cpu_reports_avx2_alone() -> None:
    """Only the first processor's line counts; flags outside the list (fma, bmi2) are left out."""
    assert isa_flags(ZEN2) == ["avx2"]
    assert this_machine(cpuinfo=ZEN2)["cpu_model"] == "AMD EPYC 7B12"


def test_no_cpuinfo_gives_no_flags_not_an_error(tmp_path: Path) -> None:
    text = fingerprint.read_cpuinfo(str(tmp_path / "absent"))
    assert text == ""
    m = this_machine(cpuinfo=text)
    assert m["isa_flags"] == []
    assert isinstance(m["cpu_model"], str)  # platform.processor(), possibly empty


def test_omp_settings_come_from_the_environment_engines_inherit() -> None:
    m = this_machine(cpuinfo="", env={"OMP_NUM_THREADS": "2", "PATH": "/bin"})
    assert m["omp_threads"] == {"OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": None}


def test_versions_are_null_when_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fingerprint.installed("enginedead-no-such-dist") is None
    assert fingerprint.installed("enginedead-no-such-dist", "pytest") == pytest.__version__
    monkeypatch.setattr(fingerprint, "TORCH_DISTS", ("enginedead-no-such-torch",))
    monkeypatch.setattr(fingerprint, "VLLM_DISTS", ("enginedead-no-such-vllm",))
    m = this_machine(cpuinfo=ZEN2)
    assert (m["torch"], m["vllm"]) == (None, None)


@pytest.mark.processes
def test_reading_the_fingerprint_imports_neither_torch_nor_vllm() -> None:
    code = (
        "import sys; from pytest_enginedead.logic.machine import this_machine; this_machine(); "
        "print(sorted({'torch', 'vllm'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def machine(**changes: object) -> dict[str, object]:
    """This machine's fingerprint on a fabricated CPU, with ``changes``."""
    return {**this_machine(cpuinfo=ZEN2, env={}), **changes}


def test_differences_name_the_fields_that_change_step_time() -> None:
    a = machine()
    assert differences(a, a) == [] and same_machine(a, a)
    b = machine(cpu_model="Intel(R) Xeon(R) Platinum 8480+", isa_flags=isa_flags(SAPPHIRE),
                omp_threads={"OMP_NUM_THREADS": "4", "VLLM_CPU_OMP_THREADS_BIND": None},
                torch="2.9.0+cpu")
    assert differences(a, b) == ["cpu_model", "isa_flags", "omp_threads", "torch"]
    assert not same_machine(a, b)
    assert differences(a, machine(cores_used=1, vllm="0.11.0")) == ["cores_used", "vllm"]


def test_memory_and_platform_do_not_make_another_machine() -> None:
    a = machine()
    b = machine(memory_bytes=2**40, platform="Linux-other", python="3.10.0", cores=64)
    assert same_machine(a, b)


def test_a_fingerprint_read_back_from_json_is_the_same_machine() -> None:
    a = machine()
    assert same_machine(a, json.loads(json.dumps(a)))
    old = {k: v for k, v in a.items() if k in ("cores", "cpu_model", "memory_bytes", "platform", "python")}
    assert "isa_flags" in differences(a, old)  # a 0.2.0 report's machine: not known to be the same


# --- the preloads: which a run's engines started with, and where they are ---------------------------


@pytest.mark.parametrize(
    ("ld_preload", "found"),
    [
        ("", []),
        ("/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4:/venv/lib/libiomp5.so", ["iomp", "tcmalloc"]),
        ("/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /venv/lib/libiomp5.so", ["iomp", "tcmalloc"]),
        ("/usr/lib/libtcmalloc_minimal.so.4", ["tcmalloc"]),
        ("/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4.5.10", ["tcmalloc"]),
        ("libiomp5.so", ["iomp"]),
        ("/torch/lib/libgomp.so.1:/usr/lib/libjemalloc.so.2", []),
        ("/opt/libtcmalloc/libfoo.so::", []),  # the name of a directory is not a library's
    ],
    ids=["unset", "both", "space-separated", "minimal", "versioned", "bare-name", "others", "a-directory"],
)
def test_preloaded_reads_ld_preload_as_vllms_worker_does(ld_preload: str, found: list[str]) -> None:
    assert fingerprint.preloaded(ld_preload) == found
    assert this_machine(cpuinfo="", env={"LD_PRELOAD": ld_preload})["preloads"] == found


def test_find_preloads_looks_in_the_venv_first_then_the_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libiomp5.so").write_bytes(b"")
    (tmp_path / "lib" / "libtcmalloc_minimal.so.4").write_bytes(b"")
    system = tmp_path / "system"
    system.mkdir()
    (system / "libtcmalloc.so.4").write_bytes(b"")
    monkeypatch.setattr(fingerprint, "LIBRARY_DIRS", ("lib", str(system)))
    # the venv's minimal build is found before the system's full one: the first directory wins
    lib = tmp_path / "lib"
    assert fingerprint.find_preloads(str(tmp_path)) == {
        "tcmalloc": str(lib / "libtcmalloc_minimal.so.4"), "iomp": str(lib / "libiomp5.so")}
    (tmp_path / "lib" / "libtcmalloc_minimal.so.4").unlink()
    assert fingerprint.find_preloads(str(tmp_path))["tcmalloc"] == str(system / "libtcmalloc.so.4")


def test_find_preloads_says_none_for_what_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fingerprint, "LIBRARY_DIRS", ("lib",))
    assert fingerprint.find_preloads(str(tmp_path)) == {"tcmalloc": None, "iomp": None}


def test_the_preload_note_says_what_a_measurement_ran_with() -> None:
    both = fingerprint.preload_note(["tcmalloc", "iomp"])
    assert both == "measured with tcmalloc and iomp preloaded, as vLLM's CPU docs serve"
    for none in (None, []):
        note = fingerprint.preload_note(none)
        assert note.startswith("measured without tcmalloc or iomp in LD_PRELOAD: a server that preloads")
        assert note.endswith("`enginedead doctor` gives the line")
    one = fingerprint.preload_note(["iomp"])
    assert one.startswith("measured without tcmalloc in LD_PRELOAD (iomp preloaded): ")
    assert "with tcmalloc" not in one and "without tcmalloc or iomp" not in one


def test_preloads_are_a_step_time_field_figures_are_not_pooled_across() -> None:
    served = this_machine(cpuinfo=ZEN2, env={"LD_PRELOAD": "/x/libtcmalloc.so.4:/y/libiomp5.so"})
    bare = this_machine(cpuinfo=ZEN2, env={})
    assert differences(served, bare) == ["preloads"] and not same_machine(served, bare)


@pytest.mark.parametrize(("flags", "words"), [
    (["amx_bf16", "amx_tile", "avx2", "avx512_bf16", "avx512f"], "AMX (AVX-512 with BF16)"),
    (["avx2", "avx512_bf16", "avx512f"], "AVX-512 with BF16"),
    (["avx2", "avx512f"], "AVX-512 (no BF16)"),
    (["avx2"], "AVX2 only"),
    (["fma"], "no AVX2"),
    ([], "ISA not recorded"),
    (None, "ISA not recorded"),
])
def test_a_machines_vector_isa_in_the_docs_words(flags: list[str] | None, words: str) -> None:
    """What changes a step's time most, named one way wherever a figure says where it ran."""
    assert fingerprint.vector_words(flags) == words


def test_a_cpu_model_without_its_trademark_marks() -> None:
    assert fingerprint.cpu_words("Intel(R) Xeon(R) Processor") == "Intel Xeon"
    assert fingerprint.cpu_words("AMD EPYC 7B13 64-Core Processor") == "AMD EPYC 7B13 64-Core"
    assert fingerprint.cpu_words(None) == "CPU"


def test_a_recorded_machine_is_named_by_its_cpu_vector_isa_and_cores() -> None:
    m = {"cpu_model": "AMD EPYC 7B13 Processor", "isa_flags": ["avx2", "avx512f"], "cores": 2,
         "memory_bytes": 24 * 2**30}
    assert fingerprint.machine_words(m) == "AMD EPYC 7B13 (AVX-512 (no BF16)), 2 cores"
    assert fingerprint.machine_words(m, memory=True) == "AMD EPYC 7B13 (AVX-512 (no BF16)), 2 cores, 24 GiB"
