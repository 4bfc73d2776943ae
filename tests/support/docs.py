"""The documentation as the tests read it: its pages, their examples, and the names they claim.

The conventions are ``docs/hooks.py``'s (loaded by path: the same code fails the docs build):
a ``python`` fence is a file named by its ``title``, ``(needs an engine)`` when it starts one,
the fences of one page are files of one directory; a ``console`` fence is a recording, with
a note above it saying on what machine and vLLM.  ``README.md`` is held to them too.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import io
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import pytest_enginedead
from tests.support.downstream import Downstream

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(pytest_enginedead.__file__).resolve().parent
#: every page a user reads: the site's, and the README
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]


@functools.lru_cache(maxsize=1)
def hooks() -> ModuleType:
    """``docs/hooks.py``, the conventions' one definition (it needs no mkdocs to be read)."""
    spec = importlib.util.spec_from_file_location("enginedead_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=1)
def recorder() -> ModuleType:
    """``docs/record.py``, which makes the console recordings again (loaded by path, as the hooks)."""
    spec = importlib.util.spec_from_file_location("enginedead_docs_record", ROOT / "docs" / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def examples() -> list[tuple[Path, Any]]:
    """(page, example) for every python fence of every page, in page order."""
    return [(page, ex) for page in PAGES for ex in hooks().python_examples(page.read_text())]


def example_id(page: Path, example: Any) -> str:
    return f"{rel(page)}::{example.file}"


def run_example(downstream: Downstream, page: Path, file: str, timeout: float = 900) -> None:
    """One example as its page means it, beside the page's other files: ``test_*.py`` under
    ``pytest -p enginedead`` (every test passes; an expected failure says ``xfail(strict=True)``),
    a file with a ``__main__`` block under ``python``, any other file imported."""
    found = {ex.file: ex for ex in hooks().python_examples(page.read_text())}
    for ex in found.values():
        (downstream.path / ex.file).write_text(ex.code)
    example = found[file]
    if file.startswith("test_"):
        out = downstream.run(file, "-rA", in_subprocess=True, timeout=timeout)
        assert out.ret == pytest.ExitCode.OK, out.text[-6000:]
        assert "passed" in out.outcomes or "xfailed" in out.outcomes, out.text[-3000:]
        return
    if '__name__ == "__main__"' in example.code:
        cmd = [sys.executable, file]
    else:
        cmd = [sys.executable, "-c", f"import {Path(file).stem}"]
    done = subprocess.run(cmd, cwd=downstream.path, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def page_dir(page: Path) -> str:
    """The directory a page's files go to when several pages run together."""
    return re.sub(r"[^A-Za-z0-9]+", "_", rel(page).removesuffix(".md"))


#: runs of several pages' test files (``run_together``), once per process: (page, file) keys -> outcome
_TOGETHER: dict[tuple[tuple[str, str], ...], Any] = {}


def run_together(downstream: Downstream, page: Path, file: str, examples: Sequence[tuple[Path, str]],
                 timeout: float = 900) -> None:
    """``run_example`` for the ``test_*.py`` examples of several pages in one run: each page's
    files in a directory of their own (pages whose files share a name never run together: a
    page's directory is on ``sys.path``), one ``pytest -p enginedead -rA`` over all of them, made
    once per process (give its tests one ``xdist_group``), so that their tests of one engine
    configuration share one engine.  Then ``file``'s own outcomes: every test passed (an
    expected failure says ``xfail(strict=True)``)."""
    groups: list[list[tuple[Path, str]]] = []
    names: list[set[str]] = []
    for p, f in examples:
        files = {ex.file for ex in hooks().python_examples(p.read_text())}
        at = next((i for i, group in enumerate(groups) if any(q == p for q, _ in group)
                   or not files & names[i]), None)
        if at is None:
            groups.append([])
            names.append(set())
            at = len(groups) - 1
        groups[at].append((p, f))
        names[at] |= files
    group = next(g for g in groups if (page, file) in g)
    key = tuple((rel(p), f) for p, f in group)
    if key not in _TOGETHER:
        for p in dict.fromkeys(p for p, _ in group):
            folder = downstream.path / page_dir(p)
            folder.mkdir(exist_ok=True)
            for ex in hooks().python_examples(p.read_text()):
                (folder / ex.file).write_text(ex.code)
        targets = [f"{page_dir(p)}/{f}" for p, f in group]
        _TOGETHER[key] = downstream.run(*targets, "-rA", in_subprocess=True, timeout=timeout)
    out = _TOGETHER[key]
    mine = f"{page_dir(page)}/{file}"
    lines = [ln for ln in out.stdout.lines
             if re.match(rf"(PASSED|FAILED|ERROR|XFAIL|XPASS) {re.escape(mine)}(::| )", ln)]
    assert lines and all(ln.startswith(("PASSED", "XFAIL")) for ln in lines), (lines, out.text[-6000:])


# --- the names the pages claim ---------------------------------------------------------------------

#: a pytest option of ours, an environment variable of ours, one of vLLM's
OPTION = re.compile(r"--enginedead-[a-z][a-z0-9-]*[a-z0-9]")
OURS = re.compile(r"\bENGINEDEAD_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9])(?P<glob>_?\*)?")
VLLMS = re.compile(r"\bVLLM_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9])(?P<glob>_?\*)?")
#: the commands, longest first (``probe-settings`` before ``probe``)
COMMANDS = ("calibrate", "doctor", "probe-settings", "probe", "check", "merge", "models")
#: ``enginedead [COMMAND] ...`` in code (not ``pytest-enginedead``, not ``-p enginedead``): the
#: command ("" for the console script's own flags) and what follows it on the line
COMMAND_LINE = re.compile(r"(?<![-\w./=])(?<!-p )enginedead(?=\s|$)(?: (?P<command>" + "|".join(COMMANDS)
                          + r")\b)?(?P<rest>[^\n`|;&#)]*)")
INLINE_CODE = re.compile(r"`([^`\n]+)`")


def code_of(markdown: str) -> list[str]:
    """The lines of code a page shows: its shell and console fences (continuations joined, a
    console's commands only) and its inline code spans."""
    lines: list[str] = []
    for fence in hooks().fences(markdown):
        if fence.lang in ("bash", "sh", "shell"):
            lines += fence.body.replace("\\\n", " ").splitlines()
        elif fence.lang == "console":
            lines += [ln[2:] for ln in fence.body.splitlines() if ln.startswith("$ ")]
    prose = hooks().FENCE.sub("", markdown)
    return lines + INLINE_CODE.findall(prose)


def command_flags(markdown: str) -> list[tuple[str, str]]:
    """(command, flag) for every flag an ``enginedead COMMAND`` line of the page's code passes;
    what follows a bare ``--`` is pytest's."""
    found = []
    for line in code_of(markdown):
        for match in COMMAND_LINE.finditer(line):
            for token in match.group("rest").split():
                if token == "--":
                    break
                if token.startswith("-") and token not in ("-", "..."):
                    # ``--report/--log``: the prose's two flags
                    found += [(match.group("command") or "", part.split("=")[0])
                              for part in token.split("/") if part.startswith("-")]
    return found


@functools.lru_cache(maxsize=1)
def our_variables() -> frozenset[str]:
    """Every ``ENGINEDEAD_*`` name the package reads or sets: string constants of its code."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"ENGINEDEAD_[A-Z0-9_]+", node.value):
                names.add(node.value)
    return frozenset(names)


@functools.lru_cache(maxsize=1)
def vllm_variables() -> frozenset[str] | None:
    """Every ``VLLM_*`` name in the installed vLLM's source (None: vLLM is not installed)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    names: set[str] = set()
    for location in spec.submodule_search_locations:
        for path in Path(location).rglob("*.py"):
            names.update(re.findall(r"\bVLLM_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")))
    return frozenset(names)


def command_options() -> dict[str, set[str]]:
    """Each command's option strings, from its argparse parser (``enginedead probe``, which
    parses its own arguments, from its help)."""
    from pytest_enginedead.command import COMMANDS, build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    out: dict[str, set[str]] = {"": {s for action in parser._actions for s in action.option_strings}}
    for name in COMMANDS:
        sub = subs.choices[name]  # type: ignore[attr-defined]
        strings = {s for action in sub._actions for s in action.option_strings}
        if name == "probe":
            text = io.StringIO()
            with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
                COMMANDS[name].main(["--help"])
            strings |= set(re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", text.getvalue()))
        out[name] = strings
    return out
