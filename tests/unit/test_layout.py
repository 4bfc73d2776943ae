"""The package's layout: rooms by the process a line runs in, small modules, the light doors.

The import rules themselves are ``lint-imports``'s (pyproject.toml, run by ``make lint``);
these check what it cannot: what a process really loads, and the sizes.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_enginedead

PACKAGE = Path(pytest_enginedead.__file__).parent
HEAVY = ("pytest", "_pytest", "vllm", "torch")


def loaded_by(code: str) -> list[str]:
    """The heavy top-level packages a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(eval(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("command", [["merge", "--help"], ["probe", "--help"], ["--help"], ["--version"],
                                     ["doctor", "--help"]],
                         ids=["merge", "probe", "top", "version", "doctor"])
def test_the_light_commands_load_no_pytest_vllm_or_torch(command: list[str]) -> None:
    """``enginedead merge`` and ``enginedead probe`` (an exec probe has about a second), the
    command's help and ``--version`` start without pytest, vLLM or torch (``enginedead doctor``'s
    whole run: ``tests/unit/commands/test_doctor.py``)."""
    code = ("import sys\nfrom pytest_enginedead.command import main\n"
            f"sys.argv = ['enginedead', *{command!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")
    assert loaded_by(code) == []


def test_the_contract_and_the_code_inside_vllm_load_no_pytest() -> None:
    """What every vLLM process imports (the plugin entry, the contract) loads neither pytest nor
    vLLM of its own accord."""
    code = ("import pytest_enginedead.inside\n"
            "from pytest_enginedead.contract import control, dumps, guardfiles, names, steps")
    assert loaded_by(code) == []


def test_no_module_over_500_lines_and_no_class_over_150() -> None:
    """A bigger one is two ideas."""
    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        if lines > 500:
            big.append(f"{path.relative_to(PACKAGE)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > 150:
                    big.append(f"{path.relative_to(PACKAGE)}: class {node.name} {size} lines")
    assert big == []


#: the written forms of the verdict and of the guard's decisions
DECISION_WORDS = {"SLOW", "HUNG", "DEAD", "CAP", "slow", "hung", "dead"}


def test_no_code_outside_the_contract_compares_decision_words() -> None:
    """A verdict or a guard decision is compared as a value (``contract.decisions``): no
    ``x == "SLOW"``, and no ``startswith``/``in`` on a decision's prose outside the contract."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "contract":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                words = [c.value for c in [node.left, *node.comparators]
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if any(w in DECISION_WORDS for w in words):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("startswith", "endswith")
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "outcome"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} (matches an outcome's words)")
    assert not found, found
