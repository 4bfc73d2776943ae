"""The package's layout: packages by the process a line runs in, small modules, the light commands.

The import rules themselves are ``lint-imports``'s (pyproject.toml, run by ``make lint``);
these check what it cannot: what a process really loads, and the sizes.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_enginedead
from pytest_enginedead.contract.decisions import GuardAction, Verdict
from pytest_enginedead.logic.reporting.checking import CheckMode, RunResult
from pytest_enginedead.logic.soak.judge import Cause, Outcome

PACKAGE = Path(pytest_enginedead.__file__).parent
HEAVY = ("pytest", "_pytest", "vllm", "torch")


def loaded_by(code: str) -> list[str]:
    """The heavy top-level packages a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(eval(done.stdout.strip().splitlines()[-1]))


@pytest.mark.processes
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


@pytest.mark.processes
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


#: every value that crosses a seam (a file, a process, the xdist wire, a report) as an enum defined
#: once: the verdict, the guard's action, check's modes and results, the soak's outcomes and causes
SEAM_VALUES = (Verdict, GuardAction, CheckMode, RunResult, Outcome, Cause)

#: a switch's spellings (``logic.inputs.values``), not the soak's cause ``false``
SWITCH_WORDS = {"true", "false", "yes", "no", "on", "off"}


def seam_words() -> dict[str, set[str]]:
    """Each written form of a seam value (name, value, the name in lower case) -> the modules
    that define a value written so (the only ones that may compare the words)."""
    words: dict[str, set[str]] = {}
    for kind in SEAM_VALUES:
        for member in kind:
            for word in {member.name, str(member.value), member.name.lower()} - SWITCH_WORDS:
                words.setdefault(word, set()).add(kind.__module__)
    return words


def compared_words(node: ast.Compare) -> list[str]:
    """The string constants a comparison holds, in a tuple, list or set on its right too."""
    parts = [node.left, *node.comparators]
    parts += [e for c in node.comparators if isinstance(c, (ast.Tuple, ast.List, ast.Set)) for e in c.elts]
    return [c.value for c in parts if isinstance(c, ast.Constant) and isinstance(c.value, str)]


def test_no_code_compares_the_words_of_a_value_that_crosses_a_seam() -> None:
    """A verdict, a guard decision, a check's mode or result, a soak request's outcome or a
    death's cause is compared as a value: no ``x == "SLOW"`` or ``mode in ("stock", ...)``
    outside the module that defines it, and no ``startswith``/``endswith`` on an outcome."""
    words = seam_words()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                found += [f"{path.relative_to(PACKAGE)}:{node.lineno} ({word!r})"
                          for word in compared_words(node) if word in words and module not in words[word]]
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("startswith", "endswith")
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "outcome"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} (matches an outcome's words)")
    assert not found, found


def test_a_comparison_of_a_seam_word_is_found() -> None:
    """The check above can fail: a comparison of each kind, outside the defining module."""
    code = 'if mode == "stock" or verdict in ("SLOW", "HUNG") or r.outcome.startswith("ok"): pass'
    [node] = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.BoolOp)]
    compared = [w for c in node.values if isinstance(c, ast.Compare) for w in compared_words(c)]
    assert compared == ["stock", "SLOW", "HUNG"] and all(w in seam_words() for w in compared)


#: ``ENGINEDEAD_X`` as a whole string: a variable's name
VARIABLE = re.compile(r"ENGINEDEAD_[A-Z0-9_]+")


def test_every_variable_of_ours_is_named_in_the_contract() -> None:
    """Every ``ENGINEDEAD_*`` variable the package reads is a constant of ``contract/names.py``
    (the options' own are named from their ini key: ``logic.inputs.optiontable``)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "contract" / "names.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        found += [f"{path.relative_to(PACKAGE)}:{node.lineno} ({node.value})" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docstrings and VARIABLE.fullmatch(node.value)]
    assert not found, found
