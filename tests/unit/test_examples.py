"""Every downstream suite under ``examples/`` collects as a downstream repo would see it.

Most of them run only in the engine tests; collecting them here (no engine starts at
collection) catches a broken example, and pins the test ids the engine tests expect.  Each
has its constant in ``tests/support/examples.py``; the test modules around them import
under names that cannot clash.
"""

from __future__ import annotations

import pytest

from pytest_enginedead.compat import registry
from tests.support import examples
from tests.support.downstream import EXAMPLES, Downstream

SUITES = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and any(p.glob("test_*.py")))

#: the ids the engine tests match their outcomes against
IDS = {
    examples.STOCK_VS_POLICY: [
        "test_stock_vs_policy.py::test_stock_deadline[bs2]",
        "test_stock_vs_policy.py::test_stock_deadline[bs64]",
        "test_stock_vs_policy.py::test_reference_policy[bs64]",
    ],
    examples.GENUINE_DEATHS: [
        "test_genuine_deaths.py::test_hang[bs4]",
        "test_genuine_deaths.py::test_a_spinning_worker_is_hung_not_a_false_death",
    ],
    examples.REAL_COMPUTE: [
        "test_real_compute.py::test_real_compute[bs2]",
        "test_real_compute.py::test_real_compute[bs64]",
    ],
    examples.XDIST_SUITE: [
        "test_xdist_suite.py::test_stock_deadline[bs2]",
        "test_xdist_suite.py::test_stock_deadline[bs64]",
        "test_xdist_suite.py::test_policy[bs8]",
        "test_xdist_suite.py::test_crash[bs4]",
    ],
}


def test_every_suite_is_checked() -> None:
    assert set(IDS) <= set(SUITES) and len(SUITES) >= 15


@pytest.mark.parametrize("suite", SUITES)
def test_suite_collects(downstream: Downstream, suite: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the model's architecture is asked of vLLM's registry at collection: not here
    known = frozenset({"LlamaForCausalLM", "Gemma4ForCausalLM"})
    monkeypatch.setattr(registry, "known_architectures", lambda: known)
    if suite == examples.REPRO:
        downstream.copy_procs()
    result = downstream.copy(suite).run("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.text
    ids = [line for line in result.stdout.lines if "::" in line]
    assert ids, result.text
    if suite in IDS:
        assert sorted(ids) == sorted(IDS[suite])


def test_test_modules_have_unique_import_names() -> None:
    """pytest's default import mode imports a test module under the name its packages give it
    (``tests/unit/harness/test_probe.py`` is ``tests.unit.harness.test_probe``), and one outside
    any package as the top-level module ``test_x``: two modules of one name fail collection of
    the whole run.  So every folder of tests is a package, and the folders that mirror the package's
    may hold test modules of one name (``logic/test_machine.py`` and ``support/test_machine.py``)."""
    tests = EXAMPLES.parent
    seen: dict[str, list[str]] = {}
    outside: list[str] = []
    for path in tests.rglob("test_*.py"):
        if EXAMPLES in path.parents:
            continue
        parts, folder = [path.stem], path.parent
        while (folder / "__init__.py").exists():
            parts.insert(0, folder.name)
            folder = folder.parent
        seen.setdefault(".".join(parts), []).append(str(path.relative_to(tests)))
        if not (path.parent / "__init__.py").exists():
            outside.append(str(path.relative_to(tests)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert outside == []


def test_every_example_has_its_constant() -> None:
    """``tests/support/examples.py`` names every directory under ``examples/`` once, and
    nothing else: a test names a suite by its constant, never by a string."""
    constants = {name: value for name, value in vars(examples).items() if name.isupper()}
    directories = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert sorted(constants.values()) == directories
    assert all(name == value.upper() for name, value in constants.items()), constants
