"""Bad input, everywhere it enters: the conventions each input's table is held to, and its helpers.

Each table row (beside the tests of its input: ``unit/pytest_plugin/test_options.py``,
``test_markers.py``, ``test_hooks.py``, ``test_fixtures.py``, ``test_handles.py``,
``test_distributed.py``; ``unit/commands/test_check.py``, ``test_calibrate.py``) is one bad
input a user can give: a flag, an ini key, an environment variable (ours or vLLM's), a marker,
the policy hook, a fixture argument, a policy object, a model directory, or the ``enginedead``
command line.  Each is run as a downstream repo would run it (``pytester``; the command through
``python -m pytest_enginedead.command``) and must end in

* a usage error (pytest: exit 4; the command: exit 2) on one line, or, for what
  belongs to one test, that test failing with its one line;
* a message naming the value and its source;
* no ``Traceback``, no ``INTERNALERROR``, no chained-exception banner;
* and no engine: starting one is refused in every run here (the ``no_engine`` and
  ``no_child_engine`` fixtures, ``tests/unit/conftest.py``).

Then: every output path and checkable input is refused before the first engine starts
(a run with vLLM present, an engine's first import refused), and nothing named
``enginedead*`` is left in the temporary directory (``leftovers``).
"""

from __future__ import annotations

import json
import os
import stat
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_enginedead.compat import versions
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from tests.support.downstream import Downstream, Outcome, enginedead

# --- the pytest inputs: a downstream repo's run ---------------------------------------------

PLAIN = "def test_plain():\n    pass\n"
#: a test of the plugin's with no engine: its run prints the header
USES_PLUGIN = "def test_policy(enginedead_policy):\n    assert enginedead_policy is not None\n"
ENGINE = "def test_engine(vllm_engine):\n    raise AssertionError('ran')\n"
SERVER = "def test_server(vllm_server):\n    raise AssertionError('ran')\n"
NOBODY = "~enginedead_no_such_user_x"
LONG = "a" * 300
#: a model directory whose path makes a one-line error long (over 250 characters)
LONG_MODEL = "/".join(["d" * 60] * 4) + "/m"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
#: a model config the bundled model's engine accepts; rows break one key of it
GOOD_CONFIG = json.loads((Path(BUNDLED_MODEL) / "config.json").read_text())

#: what the tests here take vLLM's model registry to know (the real one is asked in tests/engine)
KNOWN = frozenset({"LlamaForCausalLM"})
#: what the tests here take ``vllm.LLM`` / ``EngineArgs`` to take (importing vLLM for the real list
#: costs ~10 s a process; tests/engine/test_compat_vllm.py holds the real one)
ENGINE_ARGUMENTS = frozenset({"dtype", "enforce_eager", "gpu_memory_utilization", "max_model_len",
                              "max_num_batched_tokens", "pipeline_parallel_size", "seed",
                              "tensor_parallel_size"})
USAGE, TEST = "usage", "test"
NOISE = ("Traceback", "INTERNALERROR", "During handling of the above exception", "RuntimeWarning")


@dataclass(frozen=True)
class Case:
    """One bad input: what the downstream repo holds, how pytest runs, what must be said."""

    id: str
    needles: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str | bytes] = field(default_factory=dict)
    suite: str = PLAIN
    #: USAGE: the run ends with exit 4 and one ERROR line; TEST: the test fails with the line
    kind: str = USAGE


def config(**changes: object) -> str:
    """The bundled model's config.json with ``changes`` (None removes a key)."""
    data = {**GOOD_CONFIG, **changes}
    return json.dumps({k: v for k, v in data.items() if v is not None})


def model(text: str | bytes, name: str = "m") -> dict[str, str | bytes]:
    return {f"{name}/config.json": text}


#: a tokenizer.json cut short (as a copy that did not finish): the API server fails to load it
BAD_TOKENIZER = '{"version": "1.0", "model": {"type": "WordLevel", "vocab": {"<unk>": 0,'


def with_tokenizer(tokenizer: str, name: str = "m") -> dict[str, str | bytes]:
    """A model directory (the bundled model's config) with this ``tokenizer.json`` beside it."""
    return {**model(config(), name), f"{name}/tokenizer.json": tokenizer}


def policy_module(name: str, body: str) -> dict[str, str | bytes]:
    return {f"{name}.py": textwrap.dedent(body)}


def returning(name: str, value: str) -> dict[str, str | bytes]:
    """A policy module ``name`` whose ``p.timeout_s`` returns ``value`` (Python source)."""
    return policy_module(name, f"""
        class P:
            name = "{name}"

            def timeout_s(self, backend, max_num_seqs, max_num_batched_tokens=None):
                return {value}

        p = P()
    """)


def hook(body: str) -> dict[str, str | bytes]:
    """A conftest.py whose ``pytest_enginedead_policy`` runs ``body``."""
    return {"conftest.py": "import sys\nfrom pytest_enginedead import TimeoutPolicy\n\n\n"
            "def pytest_enginedead_policy(config):\n" + textwrap.indent(textwrap.dedent(body), "    ")}


def factory_call(call: str) -> str:
    """A test that makes one engine or server through its factory: ``call`` names which."""
    return f"def test_f({call.split('(')[0]}):\n    {call}\n"


def marked(marker: str, fixtures: str = "", body: str = "pass") -> str:
    return f"import pytest\n\n\n@pytest.mark.{marker}\ndef test_marked({fixtures}):\n    {body}\n"


NESTED = "[" * 100_000 + "]" * 100_000
HUGE_INT = '{"architectures": ["LlamaForCausalLM"], "vocab_size": ' + "9" * 5000 + "}"
LATIN1 = '{"architectures": ["LlamaForCausalLM"], "name": "caf\xe9"}'.encode("latin-1")


def prepare(repo: Path, case: Case, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Write the case's files into the repo, set its environment; return its arguments."""
    (repo / "test_case.py").write_text(case.suite)
    for name, content in case.files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:  # @VLLM@: the installed release, as a durations file records it
            path.write_text(content.replace("@VLLM@", versions.installed_version() or "none"))
    if any("{repo}/loop" in a for a in case.args):
        (repo / "loop").symlink_to(repo / "loop")
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    return [a.replace("{repo}", str(repo)) for a in case.args]


def make_nodes(repo: Path, nodes: dict[str, str]) -> dict[Path, tuple[int, int]]:
    """Make each special file (``chr``: a character device like /dev/null, ``fifo``, ``link:TARGET``);
    return their (file type, inode), for ``assert_untouched``."""
    made = {}
    for name, kind in nodes.items():
        path = repo / name
        if kind == "chr":
            if os.geteuid() != 0:
                pytest.skip("making a character device needs root")
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to(kind.removeprefix("link:"))
        st = os.lstat(path)
        made[path] = (stat.S_IFMT(st.st_mode), st.st_ino)
    return made


def assert_untouched(nodes: dict[Path, tuple[int, int]]) -> None:
    """Each special file is still what it was: the same type, the same inode (never renamed over)."""
    __tracebackhide__ = True
    for path, (kind, inode) in nodes.items():
        st = os.lstat(path)
        assert (stat.S_IFMT(st.st_mode), st.st_ino) == (kind, inode), f"{path} was replaced"


def assert_clean(text: str) -> None:
    __tracebackhide__ = True
    for noise in NOISE:
        assert noise not in text, f"{noise!r} in the output:\n{text[-3000:]}"


def usage_line(result: Outcome) -> str:
    """Exit 4 and exactly one non-blank line on stderr, the enginedead one; returned."""
    __tracebackhide__ = True
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.text[-3000:]
    lines = [ln for ln in result.stderr.str().splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("ERROR: enginedead: "), lines
    return lines[0]


def header(result: Outcome) -> str:
    """The plugin's header line (printed at session start)."""
    [line] = [ln for ln in result.stdout.lines if ln.startswith("enginedead: policy=")]
    return line


def assert_bad_input_is_one_line(downstream: Downstream, monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    """The case run as a downstream repo runs it (``pytest -p enginedead``, in-process): a usage
    error on one line, or its test failing with its one line; the needles in that line; no noise."""
    args = prepare(downstream.path, case, monkeypatch)
    result = downstream.run(*args, "-rfE")
    assert_clean(result.text)
    if case.kind == USAGE:
        line = usage_line(result)
    else:
        assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text[-3000:]
        outcomes = result.outcomes
        assert outcomes.get("failed", 0) + outcomes.get("errors", 0) >= 1, outcomes
        assert outcomes.get("passed", 0) == 0, outcomes
        line = result.stdout.str()
        # the failure's own section holds the message itself, not a traceback around it
        section = [ln for ln in result.stdout.lines
                   if case.needles[0] in ln and not ln.startswith(("FAILED ", "ERROR ", "E "))]
        assert section, line[-3000:]
    for needle in case.needles:
        assert needle in line, (needle, line[-3000:])
    if case.id == "vllm-env-with-vllm-stock":
        assert "vllm-stock" not in line  # the variable is to blame, not the valid policy name


# --- the enginedead command ----------------------------------------------------------------

#: an engine's import refused in subprocesses: vLLM's engine entry points, imported before any engine
#: starts (``from vllm import LLM``, the API server, the engine core), are recorded and refused
ENGINE_IMPORT_REFUSAL = """
import importlib.abc, os, sys

ENTRY = ("vllm.entrypoints.llm", "vllm.entrypoints.openai.api_server", "vllm.v1.engine.core",
         "vllm.v1.engine.llm_engine", "vllm.v1.engine.core_client")


class EngineImportRefusal(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ENTRY:
            with open(os.environ["ENGINEDEAD_TEST_ENGINE_IMPORTS"], "a") as f:
                f.write(f"{os.getpid()} {name}\\n")
            raise ImportError(f"refused: {name}: an engine was about to start")
        return None


sys.meta_path.insert(0, EngineImportRefusal())
"""


@dataclass(frozen=True)
class Command:
    """One bad ``enginedead`` command line: its arguments, environment, files; what it must say."""

    id: str
    args: tuple[str, ...]
    needles: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str | bytes] = field(default_factory=dict)
    #: special files the case makes first (see ``make_nodes``); each must be untouched after
    nodes: dict[str, str] = field(default_factory=dict)


def assert_command_is_one_line_exit_2(
    tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch, case: Command
) -> None:
    """Each bad command line: one line, exit 2, at once (a FIFO never hangs it: the run has a
    30 s limit), its special files untouched, and nothing left in the temporary directory."""
    if case.id == "plot-unknown-format":
        pytest.importorskip("matplotlib")
    nodes = make_nodes(tmp_path, case.nodes)
    files = dict(case.files)
    if case.id == "model-not-utf8":
        files.update(model(LATIN1))
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    done = enginedead(*case.args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert done.stdout == ""
    assert_clean(done.stdout + done.stderr)
    for needle in case.needles:
        assert needle in lines[0], (needle, lines[0])
    if case.id == "vllm-env-check-vllm-stock":
        assert "--policy" not in lines[0]  # the variable is to blame, not the valid policy name
    if case.id == "model-long-path":
        assert len(lines[0]) < 300 < len(LONG_MODEL) + 100, lines[0]
        assert LONG_MODEL not in lines[0] and str(tmp_path)[:20] in lines[0]  # the head ...
        assert "dddd/m/config.json" in lines[0]  # ... and the tail
    assert_untouched(nodes)
    assert leftovers(private_tmp) == []


# --- the xdist input: each case without -n and with -n 2, alike --------------------------------------

OK = "ok"


@dataclass(frozen=True)
class Alike(Case):
    """A case run twice, as ``pytest -p enginedead`` and as ``pytest -p enginedead -p xdist -n 2``:
    the same outcome both ways (for a usage error: exactly the same one line, exit 4).
    ``{repo}`` in a needle is the repo's path (whole only under ``-v``: a long line is shortened)."""

    #: special files the case makes first (see ``make_nodes``); each must be untouched after
    nodes: dict[str, str] = field(default_factory=dict)


#: what the tests here take vLLM's API server parser to be (``in_server.server_parser``): importing
#: the real one costs ~15 s a process (it is read in tests/engine/test_compat_vllm.py).  The options a
#: factory's server arguments in these tests reach, with vLLM's kinds: a BooleanOptionalAction, a
#: store_true without a --no- twin, JSON values, an append, ints
SERVER_PARSER = """
def _stand_in_server_parser():
    import argparse
    import json

    from pytest_enginedead.compat import in_server

    parser = argparse.ArgumentParser(prog="api_server.py")
    for flag in ("--enable-prefix-caching", "--enforce-eager"):
        parser.add_argument(flag, action=argparse.BooleanOptionalAction)
    parser.add_argument("--disable-log-stats", action="store_true")
    for flag in ("--allowed-origins", "--hf-overrides"):
        parser.add_argument(flag, type=json.loads)
    parser.add_argument("--middleware", action="append")
    for flag in ("--max-model-len", "--max-num-batched-tokens", "--seed"):
        parser.add_argument(flag, type=int)

    def refuse(message):
        raise in_server.ServerArgError(message)

    parser.error = refuse
    return parser
"""


def stand_in_server_parser() -> object:
    """``SERVER_PARSER``'s parser, in this process."""
    space: dict[str, object] = {}
    exec(SERVER_PARSER, space)  # the same source the subprocesses' stub runs
    return space["_stand_in_server_parser"]()  # type: ignore[operator]


#: vLLM's model registry and its API server's parser, stubbed in every process a run starts (xdist
#: workers too): importing the real ones costs ~12-15 s a process; what is under test is who checks,
#: and what the line says
REGISTRY_STUB = SERVER_PARSER + """
import pytest_enginedead.compat.in_server as _in_server
import pytest_enginedead.compat.registry as _registry
import pytest_enginedead.compat.versions as _versions


def _known_architectures():
    with open(os.environ["ENGINEDEAD_TEST_REGISTRY_CALLS"], "a") as f:  # who asked: a worker, or not
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "controller") + "\\n")
    return {"LlamaForCausalLM"}


_registry.known_architectures = _known_architectures
_versions.vllm_missing_reason = lambda: None
_in_server.server_parser = _stand_in_server_parser
"""


def assert_alike_with_and_without_xdist(
    downstream: Downstream, stub_registry: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch,
    case: Alike,
) -> None:
    """Without ``-n`` and with ``-n 2`` (where the controller collects nothing), the same input
    gives the same outcome: a usage error is exactly the same one line and exit 4, never xdist's
    INTERNALERROR; a test's failure is the same line both ways; a device or FIFO given as the report
    is untouched (same type, same inode); no engine starts (the ``no_engine`` fixture, and the
    ``stub_registry`` one in the processes the run starts), and nothing is left in the temporary
    directory (``private_tmp``)."""
    __tracebackhide__ = True
    args = prepare(downstream.path, case, monkeypatch)
    nodes = make_nodes(downstream.path, case.nodes)
    needles = [n.replace("{repo}", str(downstream.path)) for n in case.needles]
    plain = downstream.run(*args, "-rfE")
    n2 = downstream.run(*args, "-rfE", "-n", "2", plugins=["xdist"], in_subprocess=True, timeout=120)
    for result in (plain, n2):
        assert_clean(result.text)
    if case.kind == USAGE:
        line = usage_line(plain)
        assert usage_line(n2) == line
        for needle in needles:
            assert needle in line, (needle, line)
    elif case.kind == TEST:
        assert plain.ret == n2.ret == pytest.ExitCode.TESTS_FAILED, n2.text[-3000:]
        assert plain.outcomes.get("failed", 0) + plain.outcomes.get("errors", 0) == len(
            [ln for ln in case.suite.splitlines() if ln.startswith("def test_")]
        ), plain.outcomes
        for result in (plain, n2):
            assert result.outcomes.get("passed", 0) == 0, result.outcomes
            shown = [ln for ln in result.stdout.lines if not ln.startswith(("FAILED ", "ERROR ", "E "))]
            for needle in needles:  # the failure's own section holds the message itself
                assert any(needle in ln for ln in shown), (needle, result.text[-3000:])
    else:
        assert plain.ret == n2.ret == pytest.ExitCode.OK, (plain.text[-3000:], n2.text[-3000:])
        assert plain.outcomes == n2.outcomes
    if case.id == "model-long-path":
        assert len(line) < 300 < len(str(downstream.path / LONG_MODEL)), line
        assert LONG_MODEL not in line and "dddd/m/config.json" in line, line
    assert_untouched(nodes)
    assert leftovers(private_tmp) == []


# --- nothing left in the temporary directory ------------------------------------------------------


def leftovers(tmp: Path) -> list[str]:
    """What the plugin or the command left: run directories, logs, an output's temporary sibling."""
    return sorted(p.name for p in tmp.iterdir() if p.name.lstrip(".").startswith("enginedead"))
