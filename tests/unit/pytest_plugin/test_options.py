"""Options: precedence, the header, and every bad value as one clear UsageError line.

The flags, ini keys and variables (ours and vLLM's), with the policy and the model directory
they name: their bad inputs are the table ``CASES`` (conventions:
``tests/support/badinput.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_enginedead.logic.inputs.optiontable import OPTIONS
from tests.support import examples
from tests.support.badinput import (
    BAD_TOKENIZER,
    ENGINE,
    HUGE_INT,
    LATIN1,
    LONG,
    NESTED,
    NOBODY,
    SERVER,
    TEST,
    Alike,
    Case,
    assert_alike_with_and_without_xdist,
    assert_bad_input_is_one_line,
    assert_clean,
    config,
    factory_call,
    header,
    hook,
    marked,
    model,
    policy_module,
    returning,
    usage_line,
    with_tokenizer,
)
from tests.support.downstream import Downstream, Outcome


def usage_error(result: Outcome) -> str:
    """Assert a clean UsageError (exit 4, no traceback) and return its one enginedead line."""
    out = result.stdout.str() + "\n" + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR == 4, out
    assert "Traceback" not in out
    assert "INTERNALERROR" not in out
    lines = [ln for ln in out.splitlines() if "enginedead" in ln]
    assert len(lines) == 1, lines
    assert lines[0].startswith("ERROR: enginedead: ")
    return lines[0]


@pytest.fixture
def plain(downstream: Downstream) -> Downstream:
    """A downstream repo with one test that uses the plugin (its policy) and no engine: the header
    says the run's settings."""
    return downstream.copy(examples.USES_PLUGIN)


# --- batch sizes: every source ------------------------------------------------------------

BAD_SIZES = [
    ("abc", "'abc' is not a whole number"),
    ("0", "batch size 0 must be at least 1"),
    ("-3", "batch size -3 must be at least 1"),
    ("8,,64", "empty item in '8,,64'"),
    ("8,x", "'x' is not a whole number"),
]


@pytest.mark.parametrize(
    ("raw", "why"), [*BAD_SIZES, ("", "no batch sizes given"), ("  ", "no batch sizes given")]
)
def test_bad_batch_sizes_on_the_command_line(plain: Downstream, raw: str, why: str) -> None:
    """The flag's value and 'command line' are named, with what is wrong."""
    line = usage_error(plain.run(f"--enginedead-batch-sizes={raw}"))
    assert f"--enginedead-batch-sizes={raw!r} (from command line): " in line
    assert why in line


@pytest.mark.parametrize(("raw", "why"), BAD_SIZES)
def test_bad_batch_sizes_from_the_environment(
    plain: Downstream, monkeypatch: pytest.MonkeyPatch, raw: str, why: str
) -> None:
    """ENGINEDEAD_BATCH_SIZES is named as the source."""
    monkeypatch.setenv("ENGINEDEAD_BATCH_SIZES", raw)
    line = usage_error(plain.run())
    assert f"ENGINEDEAD_BATCH_SIZES={raw!r} (from environment): " in line
    assert why in line


@pytest.mark.parametrize(("raw", "why"), BAD_SIZES)
def test_bad_batch_sizes_from_the_ini_file(plain: Downstream, raw: str, why: str) -> None:
    """The ini key and the ini file's name are named as the source."""
    plain.pytester.makeini(f"[pytest]\nenginedead_batch_sizes = {raw}\n")
    line = usage_error(plain.run())
    assert f"enginedead_batch_sizes = {raw!r} (from tox.ini): " in line
    assert why in line


def test_bad_lower_precedence_values_are_not_read(plain: Downstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad env or ini value does not matter when the command line sets the option."""
    plain.pytester.makeini("[pytest]\nenginedead_batch_sizes = nope\n")
    monkeypatch.setenv("ENGINEDEAD_BATCH_SIZES", "also-nope")
    result = plain.run("--enginedead-batch-sizes=16")
    result.assert_outcomes(passed=1)
    assert "batch_sizes=16," in header(result)


# --- precedence: CLI > env > ini > default ------------------------------------------------


def test_precedence_cli_env_ini_default(plain: Downstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each source wins over those below it, as the header shows."""
    assert "batch_sizes=8,64," in header(plain.run())
    plain.pytester.makeini("[pytest]\nenginedead_batch_sizes = 4\nenginedead_policy = vllm-stock\n")
    ini = header(plain.run())
    assert "batch_sizes=4," in ini and "policy=vllm-stock (tox.ini)" in ini
    monkeypatch.setenv("ENGINEDEAD_BATCH_SIZES", "2, 32")
    monkeypatch.setenv("ENGINEDEAD_POLICY", "reference")
    env = header(plain.run())
    assert "batch_sizes=2,32," in env and "policy=reference (environment)" in env
    cli = header(plain.run("--enginedead-batch-sizes=3,3,5", "--enginedead-policy=vllm-stock"))
    assert "batch_sizes=3,5," in cli and "policy=vllm-stock (command line)" in cli


def test_header_defaults(plain: Downstream) -> None:
    """Default header: reference policy, 8,64, and the vLLM version (or 'absent')."""
    line = header(plain.run())
    assert line.startswith("enginedead: policy=reference (default), batch_sizes=8,64, vllm=")
    assert re.search(r"vllm=(\d+\.\d+\S*|unknown|absent)$", line)
    assert "model=" not in line  # the bundled model is not spelled out


def test_header_warns_when_multiprocessing_is_off(plain: Downstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """VLLM_ENABLE_V1_MULTIPROCESSING=0 would remove the deadline: the header says it is ignored."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    plain.run().stdout.fnmatch_lines(
        ["enginedead: VLLM_ENABLE_V1_MULTIPROCESSING=0 ignored for harness engines*"]
    )


@pytest.mark.parametrize(("source", "where"), [
    ("flag", "--enginedead-guard='1' (from command line)"),
    ("env", "ENGINEDEAD_GUARD='1' (from environment); ENGINEDEAD_GUARD is also the production switch"),
])
def test_header_says_when_every_engine_is_guarded(
    plain: Downstream, monkeypatch: pytest.MonkeyPatch, source: str, where: str
) -> None:
    """The guard for every engine, and where that came from: an operator's exported production
    ``ENGINEDEAD_GUARD=1`` is also this option's, and the header says so; off, nothing is said."""
    assert "enginedead: the guard" not in plain.run().stdout.str()
    if source == "env":
        monkeypatch.setenv("ENGINEDEAD_GUARD", "1")
    out = plain.run(*(["--enginedead-guard"] if source == "flag" else [])).stdout.str()
    line = next(ln for ln in out.splitlines() if ln.startswith("enginedead: the guard is on"))
    assert line.startswith(f"enginedead: the guard is on for every engine: {where}"), line


def test_help_documents_every_option(downstream: Downstream) -> None:
    """``pytest --help`` works and documents every --enginedead-* flag and ini key."""
    result = downstream.run("--help")
    text = result.stdout.str()
    assert result.ret == 0, text + result.stderr.str()
    for opt in OPTIONS:
        assert opt.flag in text, opt.flag
        assert opt.name in text, opt.name  # the ini key
    assert "(default 0.05 = 5%)" in text
    assert "(default 0.1; at least 0.001, at most 60)" in " ".join(text.split())  # the interval's bounds


def test_header_names_policy_and_vllm(downstream: Downstream) -> None:
    """The run's header, after pytest's "collected" line, says which policy and which vLLM are in
    force."""
    result = downstream.copy(examples.USES_PLUGIN).run()
    result.stdout.fnmatch_lines(["collected 1 item",
                                 "enginedead: policy=reference*, batch_sizes=8,64, vllm=*"])


@pytest.mark.processes
def test_a_run_without_a_test_of_the_plugins_hears_nothing_of_it(
    downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed, the plugin loads in every run of its environment: one whose tests use none of its
    fixtures or markers gets no header line (even with the guard exported for production), and
    imports nothing of the engine machinery."""
    monkeypatch.setenv("ENGINEDEAD_GUARD", "1")
    (downstream.path / "conftest.py").write_text(
        "import sys\n\ndef pytest_unconfigure(config):\n"
        "    mods = sorted(m for m in sys.modules if m.startswith('pytest_enginedead.'))\n"
        "    print('LOADED ' + ' '.join(mods))\n")
    result = downstream.copy(examples.PLAIN).run("-s", in_subprocess=True)
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "enginedead:" not in text, text
    (loaded,) = [ln for ln in result.stdout.lines if ln.startswith("LOADED ")]
    heavy = [m for m in loaded.split()[1:] if m.split(".")[1] in ("harness", "vllm_plugin", "commands")
             or m.startswith(("pytest_enginedead.logic.sizing", "pytest_enginedead.pytest_plugin.fixtures",
                              "pytest_enginedead.pytest_plugin.collection",
                              "pytest_enginedead.pytest_plugin.handles"))]
    assert heavy == [], loaded


# --- model ----------------------------------------------------------------------------------


def test_model_that_does_not_exist(plain: Downstream) -> None:
    missing = plain.path / "no-such-model"
    line = usage_error(plain.run(f"--enginedead-model={missing}", "-v"))  # -v: long paths whole
    assert f"--enginedead-model={str(missing)!r} (from command line): " in line
    assert "does not exist" in line


def test_model_dir_without_config(plain: Downstream) -> None:
    (plain.path / "empty-model").mkdir()
    line = usage_error(plain.run("--enginedead-model=empty-model"))
    assert "--enginedead-model='empty-model' (from command line): " in line
    assert "has no config.json" in line


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ("{not json", "config.json is not valid JSON"),
        ("[1, 2]", "config.json must hold a JSON object, not list"),
        ('{"architectures": "LlamaForCausalLM"}', '"architectures" must be a list of class names'),
    ],
)
def test_model_with_bad_config(plain: Downstream, config: str, why: str) -> None:
    model = plain.path / "bad-model"
    model.mkdir()
    (model / "config.json").write_text(config)
    line = usage_error(plain.run(f"--enginedead-model={model}"))
    assert "(from command line): " in line and why in line


def test_model_path_that_is_a_file(plain: Downstream) -> None:
    line = usage_error(plain.run("--enginedead-model=test_uses_plugin.py"))
    assert "is not a directory" in line


def test_good_model_from_ini_is_relative_to_the_ini_file(
    plain: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative model path in the ini file means beside the ini file, wherever pytest runs."""
    model = plain.path / "models" / "mine"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    plain.pytester.makeini("[pytest]\nenginedead_model = models/mine\n")
    sub = plain.path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    result = plain.run(str(plain.path / "test_uses_plugin.py"))
    result.assert_outcomes(passed=1)
    assert header(result).endswith(f", model={model.resolve()}")


def test_bad_model_from_env_names_the_variable(plain: Downstream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINEDEAD_MODEL", "/no/such/dir")
    line = usage_error(plain.run())
    assert "ENGINEDEAD_MODEL='/no/such/dir' (from environment): " in line


# --- policy -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("edmissing_mod:policy", "no module named 'edmissing_mod'"),
        ("edpol:missing", "module 'edpol' has no attribute 'missing'"),
        ("edpol:not_a_policy", "edpol:not_a_policy is a int with no callable timeout_s"),
        ("fastest", "use reference, vllm-stock or module:attr, not 'fastest'"),
    ],
)
def test_bad_policy_on_the_command_line(plain: Downstream, spec: str, why: str) -> None:
    plain.copy(f"{examples.POLICY_MODULES}/edpol.py")
    line = usage_error(plain.run(f"--enginedead-policy={spec}"))
    assert f"--enginedead-policy={spec!r} (from command line): {why}" in line


def test_bad_policy_from_env_and_ini(plain: Downstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy's source is named the same way as every other option's."""
    plain.pytester.makeini("[pytest]\nenginedead_policy = edmissing_mod:policy\n")
    line = usage_error(plain.run())
    assert "enginedead_policy = 'edmissing_mod:policy' (from tox.ini): no module named" in line
    monkeypatch.setenv("ENGINEDEAD_POLICY", "edmissing_too:policy")
    line = usage_error(plain.run())
    assert (
        "ENGINEDEAD_POLICY='edmissing_too:policy' (from environment): no module named 'edmissing_too'"
        in line
    )


# --- liveness settings ------------------------------------------------------------------

#: the sample interval's bounds, as a refusal says them (and the option's help)
INTERVAL = "must be at least 0.001 (1 ms: shorter spins a core sampling) and at most 60 seconds"


@pytest.mark.parametrize(
    ("flag", "raw", "why"),
    [
        ("--enginedead-busy-threshold", "x", "'x' is not a number"),
        ("--enginedead-busy-threshold", "0", "must be above 0"),
        ("--enginedead-busy-threshold", "-5%", "must be above 0"),
        ("--enginedead-sample-interval", "x", "'x' is not a number of seconds"),
        ("--enginedead-sample-interval", "0", INTERVAL),
        ("--enginedead-sample-interval", "600", INTERVAL),
        ("--enginedead-sample-interval", "1e-9", INTERVAL),
    ],
)
def test_bad_liveness_settings(plain: Downstream, flag: str, raw: str, why: str) -> None:
    line = usage_error(plain.run(f"{flag}={raw}"))
    assert f"{flag}={raw!r} (from command line): " in line and why in line


def test_good_liveness_settings_run(plain: Downstream) -> None:
    """Valid values (a percentage, a fraction of a second) are accepted."""
    result = plain.run("--enginedead-busy-threshold=10%", "--enginedead-sample-interval=0.05")
    result.assert_outcomes(passed=1)


# --- bad input here: one line each (conventions: tests/support/badinput.py) ---------------------------------

CASES = [
    # --- flags --------------------------------------------------------------------------
    Case("flag-empty-batch-sizes",
         ("--enginedead-batch-sizes='' (from command line)", "no batch sizes given"),
         args=("--enginedead-batch-sizes=",)),
    Case("flag-threshold-above-64", ("--enginedead-busy-threshold='100' (from command line)",
                                     "must be above 0 and at most 64"),
         args=("--enginedead-busy-threshold=100",)),
    Case("flag-threshold-nan", ("--enginedead-busy-threshold='nan'", "at most 64"),
         args=("--enginedead-busy-threshold=nan",)),
    Case("flag-interval-zero", ("--enginedead-sample-interval='0'", INTERVAL),
         args=("--enginedead-sample-interval=0",)),
    Case("flag-report-under-a-file", ("--enginedead-report=", "(from command line)", "is not a directory"),
         args=("--enginedead-report={repo}/afile/sub/r.json",), files={"afile": "x"}),
    Case("flag-report-unknown-user", (f"'{NOBODY}/r.json' cannot be expanded", "(from command line)"),
         args=(f"--enginedead-report={NOBODY}/r.json",)),
    Case("flag-report-a-directory", ("is a directory; give a file path", "(from command line)"),
         args=("--enginedead-report={repo}",)),
    Case("flag-report-name-too-long", ("too long a file name (at most 255 bytes)", "(from command line)"),
         args=(f"--enginedead-report={LONG}.json",)),
    Case("flag-report-path-too-long", ("cannot be used: File name too long", "(from command line)"),
         args=("--enginedead-report={repo}/" + "/".join([LONG] * 3) + "/r.json",)),
    # --- shards and durations ----------------------------------------------------------
    Case("flag-shard-malformed", ("--enginedead-shard='1-2' (from command line)",
                                  "'1-2' is not K/N; use e.g. 1/2"),
         args=("--enginedead-shard=1-2",)),
    Case("flag-shard-out-of-range", ("--enginedead-shard='3/2' (from command line)",
                                     "there is no shard 3 of 2; K runs from 1 to 2"),
         args=("--enginedead-shard=3/2",)),
    Case("flag-shard-zero", ("--enginedead-shard='0/2'", "there is no shard 0 of 2"),
         args=("--enginedead-shard=0/2",)),
    Case("flag-shard-no-shards", ("--enginedead-shard='1/0'", "the number of shards must be from 1 to 1000"),
         args=("--enginedead-shard=1/0",)),
    Case("env-shard-words", ("ENGINEDEAD_SHARD='one/two' (from environment)", "is not K/N"),
         env={"ENGINEDEAD_SHARD": "one/two"}),
    Case("ini-shard-negative", ("enginedead_shard = '-1/2' (from tox.ini)", "is not K/N"),
         files={"tox.ini": "[pytest]\nenginedead_shard = -1/2\n"}),
    Case("flag-durations-missing", ("--enginedead-durations='nope.json' (from command line)",
                                    "'nope.json' does not exist; write it with --enginedead-store-durations"),
         args=("--enginedead-shard=1/2", "--enginedead-durations=nope.json")),
    Case("flag-durations-foreign", ("--enginedead-durations='d.json' (from command line) is not an "
                                    "enginedead durations file (no 'enginedead_durations' key)",),
         args=("--enginedead-shard=1/2", "--enginedead-durations=d.json"),
         files={"d.json": '{"test_x.py::test_plain": 1.0}'}),
    Case("flag-durations-truncated", ("--enginedead-durations='d.json' (from command line) is not a "
                                      "durations file: not JSON",),
         args=("--enginedead-shard=1/2", "--enginedead-durations=d.json"),
         files={"d.json": '{"enginedead_durations": 1, "vllm": "0.3'}),
    Case("flag-durations-other-release", ("--enginedead-durations='d.json' (from command line) was "
                                          "recorded on vLLM '0.1.0', this run has",),
         args=("--enginedead-shard=1/2", "--enginedead-durations=d.json"),
         files={"d.json": '{"enginedead_durations": 1, "vllm": "0.1.0", "tests": {}}'}),
    Case("flag-durations-not-seconds", ("--enginedead-durations='d.json'",
                                        "'t::x' has 'long', not a number of seconds >= 0"),
         args=("--enginedead-durations=d.json",),
         files={"d.json": '{"enginedead_durations": 1, "vllm": "@VLLM@", "tests": {"t::x": "long"}}'}),
    Case("flag-durations-a-directory", ("--enginedead-durations='sub' (from command line): "
                                        "cannot read 'sub'",),
         args=("--enginedead-durations=sub",), files={"sub/x": "x"}),
    Case("flag-store-durations-is-the-report", ("--enginedead-store-durations='r.json' (from command line): "
                                                "names the same file as --enginedead-report='r.json'",),
         args=("--enginedead-report=r.json", "--enginedead-store-durations=r.json")),
    Case("flag-store-durations-under-a-file", ("--enginedead-store-durations=", "is not a directory"),
         args=("--enginedead-store-durations=afile/d.json",), files={"afile": "x"}),
    Case("flag-model-unknown-user", (f"'{NOBODY}/m' cannot be expanded", "--enginedead-model="),
         args=(f"--enginedead-model={NOBODY}/m",)),
    Case("flag-model-name-too-long", ("cannot be used: File name too long", "(from command line)"),
         args=(f"--enginedead-model={LONG}",)),
    Case("flag-model-empty", ("--enginedead-model='' (from command line)", "no model directory given"),
         args=("--enginedead-model=",)),
    Case("flag-model-symlink-loop", ("cannot be used: Too many levels of symbolic links",),
         args=("--enginedead-model={repo}/loop",)),
    Case("flag-policy-empty", ("--enginedead-policy='' (from command line)", "no policy given"),
         args=("--enginedead-policy=",)),
    Case("flag-policy-relative-module", ("--enginedead-policy='.pol:p'", "'.pol' is not a module name"),
         args=("--enginedead-policy=.pol:p",)),
    # --- environment: vLLM's and ours -----------------------------------------------------
    Case("vllm-env-not-an-integer", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='abc' (from environment)",
                                     "is not an integer"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "abc"}),
    Case("vllm-env-with-vllm-stock", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='abc' (from environment)",),
         args=("--enginedead-policy=vllm-stock",), env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "abc"}),
    Case("vllm-env-fraction", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='1.5'", "is not an integer"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1.5"}),
    Case("vllm-env-zero", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='0'", "must be at least 1"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "0"}, suite=ENGINE),
    Case("vllm-env-negative", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='-3'", "must be at least 1"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "-3"}),
    Case("vllm-env-empty", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=''", "is empty"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": ""}),
    Case("vllm-env-with-hook", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='x'",),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "x"}, files=hook("return TimeoutPolicy.vllm_stock()")),
    Case("env-empty-batch-sizes", ("ENGINEDEAD_BATCH_SIZES='' (from environment)", "no batch sizes given"),
         env={"ENGINEDEAD_BATCH_SIZES": ""}),
    Case("env-guard-not-a-switch", ("ENGINEDEAD_GUARD='maybe' (from environment)", "is not a switch"),
         env={"ENGINEDEAD_GUARD": "maybe"}),
    Case("env-report-under-a-file", ("ENGINEDEAD_REPORT=", "(from environment)", "is not a directory"),
         env={"ENGINEDEAD_REPORT": "afile/r.json"}, files={"afile": "x"}),
    Case("env-threshold-above-64", ("ENGINEDEAD_BUSY_THRESHOLD='65' (from environment)", "at most 64"),
         env={"ENGINEDEAD_BUSY_THRESHOLD": "65"}),
    Case("env-interval-not-a-number", ("ENGINEDEAD_SAMPLE_INTERVAL='abc' (from environment)",
                                       "is not a number of seconds"),
         env={"ENGINEDEAD_SAMPLE_INTERVAL": "abc"}),
    Case("env-model-nested-json", ("ENGINEDEAD_MODEL=", "nests too deeply for Python's JSON parser"),
         env={"ENGINEDEAD_MODEL": "m"}, files=model(NESTED)),
    Case("env-policy-blank", ("ENGINEDEAD_POLICY='  ' (from environment)", "no policy given"),
         env={"ENGINEDEAD_POLICY": "  "}),
    # --- ini: pytest.ini and pyproject.toml ----------------------------------------------------
    Case("ini-empty-batch-sizes", ("enginedead_batch_sizes = '' (from pytest.ini)", "no batch sizes given"),
         files={"pytest.ini": "[pytest]\nenginedead_batch_sizes =\n"}),
    Case("ini-threshold-above-64", ("enginedead_busy_threshold = '100' (from pytest.ini)", "at most 64"),
         files={"pytest.ini": "[pytest]\nenginedead_busy_threshold = 100\n"}),
    # --- nodes: a number from 1, and ranks that spread evenly over them ------------------------
    Case("flag-nodes-zero", ("--enginedead-nodes='0' (from command line)", "is not a number of nodes from 1"),
         args=("--enginedead-nodes=0",)),
    Case("env-nodes-uneven", ("ENGINEDEAD_NODES='2' (from environment)",
                              "3 rank(s) do not spread evenly over 2 nodes"),
         env={"ENGINEDEAD_NODES": "2"}, args=("--enginedead-tensor-parallel-size=3",)),
    Case("ini-nodes-text", ("enginedead_nodes = 'two' (from pytest.ini)", "is not a number of nodes"),
         files={"pytest.ini": "[pytest]\nenginedead_nodes = two\n"}),
    Case("ini-empty-policy", ("enginedead_policy = '' (from pytest.ini)", "no policy given"),
         files={"pytest.ini": "[pytest]\nenginedead_policy =\n"}),
    Case("ini-empty-report", ("enginedead_report = '' (from pytest.ini)", "no path given"),
         files={"pytest.ini": "[pytest]\nenginedead_report =\n"}),
    Case("toml-list-model",
         ("enginedead_model = ['a', 'b'] (from pyproject.toml)", "a list, where one value"),
         files={"pyproject.toml": '[tool.pytest.ini_options]\nenginedead_model = ["a", "b"]\n'}),
    Case("toml-list-bad-size", ("enginedead_batch_sizes = [8, 0] (from pyproject.toml)",
                                "batch size 0 must be at least 1"),
         files={"pyproject.toml": "[tool.pytest.ini_options]\nenginedead_batch_sizes = [8, 0]\n"}),
    Case("toml-native-list", ("enginedead_batch_sizes (from pyproject.toml)", "expects a string",
                              'write it as a string, e.g. enginedead_batch_sizes = "8,64"'),
         files={"pyproject.toml": "[tool.pytest]\nenginedead_batch_sizes = [8, 64]\n"}),
    Case("ini-override-empty-item", ("enginedead_batch_sizes = '8,,64' (from -o/--override-ini)",
                                     "empty item in '8,,64'"),
         args=("-o", "enginedead_batch_sizes=8,,64")),
    Case("toml-number-interval", ("enginedead_sample_interval = '0' (from pyproject.toml)",
                                  INTERVAL),
         files={"pyproject.toml": "[tool.pytest.ini_options]\nenginedead_sample_interval = 0\n"}),
    Case("ini-model-unknown-user", (f"enginedead_model = '{NOBODY}' (from pytest.ini)", "cannot be expanded"),
         files={"pytest.ini": f"[pytest]\nenginedead_model = {NOBODY}\n"}),
    # --- policy objects: what they return, how they load -----------------------------------------
    Case("policy-nan-engine", ("policy pol_nan: timeout_s(CPU, 8) returned nan", "finite number of seconds"),
         args=("--enginedead-policy=pol_nan:p",), files=returning("pol_nan", "float('nan')"), suite=ENGINE,
         kind=TEST),
    Case("policy-inf-engine", ("policy pol_inf: timeout_s(CPU, 8) returned inf",),
         args=("--enginedead-policy=pol_inf:p",), files=returning("pol_inf", "float('inf')"), suite=ENGINE,
         kind=TEST),
    Case("policy-zero-engine", ("policy pol_zero: timeout_s(CPU, 8) returned 0", ">= 1"),
         args=("--enginedead-policy=pol_zero:p",), files=returning("pol_zero", "0"), suite=ENGINE, kind=TEST),
    Case("policy-negative-engine", ("policy pol_neg: timeout_s(CPU, 8) returned -5",),
         args=("--enginedead-policy=pol_neg:p",), files=returning("pol_neg", "-5"), suite=ENGINE, kind=TEST),
    Case("policy-text-engine", ("policy pol_txt: timeout_s(CPU, 8) returned 'soon', not a number",),
         args=("--enginedead-policy=pol_txt:p",), files=returning("pol_txt", "'soon'"), suite=ENGINE,
         kind=TEST),
    Case("policy-bool-engine", ("policy pol_bool: timeout_s(CPU, 8) returned True, not a number of seconds "
                                "(bool; give an int or a float)",),
         args=("--enginedead-policy=pol_bool:p",), files=returning("pol_bool", "True"), suite=ENGINE,
         kind=TEST),
    Case("policy-none-server", ("policy pol_none: timeout_s(CPU, 8) returned None, not a number",),
         args=("--enginedead-policy=pol_none:p",), files=returning("pol_none", "None"), suite=SERVER,
         kind=TEST),
    Case("policy-raises-engine", ("policy pol_div: timeout_s(CPU, 8) raised ZeroDivisionError",),
         args=("--enginedead-policy=pol_div:p",), files=returning("pol_div", "1 / 0"), suite=ENGINE,
         kind=TEST),
    Case("policy-nan-invariants", ("policy pol_nan2 breaks", "timeout_s(CPU, 1) returned nan"),
         args=("--enginedead-policy=pol_nan2:p",), files=returning("pol_nan2", "float('nan')"),
         suite=marked("enginedead_invariants('cpu_gt_gpu')"), kind=TEST),
    Case("policy-text-invariants", ("capped: timeout_s(CPU, 1048576) returned 'x', not a number of seconds",),
         args=("--enginedead-policy=pol_txt2:p",), files=returning("pol_txt2", "'x'"),
         suite=marked("enginedead_invariants('capped')"), kind=TEST),
    Case("policy-nan-factory", ("vllm_engine_factory: policy pol_nan3: timeout_s(CPU, 4) returned nan",),
         args=("--enginedead-policy=pol_nan3:p",), files=returning("pol_nan3", "float('nan')"),
         suite="def test_f(vllm_engine_factory):\n    vllm_engine_factory(4)\n", kind=TEST),
    Case("policy-module-exits", ("--enginedead-policy='pol_exit:p' (from command line)",
                                 "importing 'pol_exit' failed: SystemExit: 2"),
         args=("--enginedead-policy=pol_exit:p",), files=policy_module("pol_exit", "raise SystemExit(2)\n")),
    Case("policy-module-getattr-raises", ("pol_ga:p: reading 'p' raised KeyError",),
         args=("--enginedead-policy=pol_ga:p",),
         files=policy_module("pol_ga", "def __getattr__(name):\n    raise KeyError(name)\n")),
    Case("policy-timeout-s-property-raises", ("pol_prop:p: reading timeout_s raised RuntimeError: nope",),
         args=("--enginedead-policy=pol_prop:p",), files=policy_module("pol_prop", """
             class P:
                 @property
                 def timeout_s(self):
                     raise RuntimeError("nope")
             p = P()
         """)),
    Case("policy-fixed-infinite", ("importing 'pol_fix' failed: ValueError: TimeoutPolicy.fixed",),
         args=("--enginedead-policy=pol_fix:p",),
         files=policy_module("pol_fix", "from pytest_enginedead import TimeoutPolicy\n"
                                        "p = TimeoutPolicy.fixed(float('inf'))\n")),
    # --- model directories an engine cannot run -----------------------------------------------------
    Case("model-negative-vocab", ('"vocab_size": -1 must be at least 1', "--enginedead-model='",
                                  "(from command line)"),
         args=("--enginedead-model=m",), files=model(config(vocab_size=-1)), suite=ENGINE),
    Case("model-fractional-vocab", ('"vocab_size": 32000.5 is not a whole number',),
         args=("--enginedead-model=m",), files=model(config(vocab_size=32000.5)), suite=ENGINE),
    Case("model-bool-hidden", ('"hidden_size": True is not a whole number',),
         args=("--enginedead-model=m",), files=model(config(hidden_size=True)), suite=ENGINE),
    Case("model-text-layers", ('"num_hidden_layers": \'2\' is not a whole number',),
         args=("--enginedead-model=m",), files=model(config(num_hidden_layers="2")), suite=ENGINE),
    Case("model-zero-heads", ('"num_attention_heads": 0 must be at least 1',),
         args=("--enginedead-model=m",), files=model(config(num_attention_heads=0)), suite=SERVER),
    Case("model-hidden-not-divisible", ('"hidden_size" 250 does not split into "num_attention_heads" 4',),
         args=("--enginedead-model=m",), files=model(config(hidden_size=250, head_dim=None)), suite=ENGINE),
    Case("model-kv-heads-not-dividing",
         ('"num_attention_heads" 4 is not a multiple of "num_key_value_heads" 3',),
         args=("--enginedead-model=m",), files=model(config(num_key_value_heads=3)), suite=ENGINE),
    Case("model-infinite-vocab", ('"vocab_size": inf is not a whole number',),
         args=("--enginedead-model=m",),
         files=model(config(vocab_size=1).replace('"vocab_size": 1', '"vocab_size": 1e999')),
         suite=ENGINE),
    Case("model-huge-vocab", ('"vocab_size": 10000000000000000000000000000000000000000 is too large',),
         args=("--enginedead-model=m",), files=model(config(vocab_size=10**40)), suite=ENGINE),
    Case("model-nested-text-config", ('"text_config.vocab_size": 0 must be at least 1',),
         args=("--enginedead-model=m",), files=model(config(text_config={"vocab_size": 0})), suite=ENGINE),
    Case("model-json-nests-too-deep", ("--enginedead-model='m' (from command line)", "nests too deeply"),
         args=("--enginedead-model=m",), files=model(NESTED)),
    Case("model-json-huge-number", ("is not valid JSON: Exceeds the limit (4300 digits)",),
         args=("--enginedead-model=m",), files=model(HUGE_INT)),
    Case("model-json-not-utf8", ("config.json is not UTF-8 text (invalid continuation byte",),
         args=("--enginedead-model=m",), files=model(LATIN1)),
    Case("model-config-is-a-directory", ("has no config.json",),
         args=("--enginedead-model=m",), files={"m/config.json/x": "{}"}),
    Case("model-unknown-architecture", ("--enginedead-model='", "(from command line)",
                                        "names architecture NoSuchModelForCausalLM, which vLLM"),
         args=("--enginedead-model=m",), files=model(config(architectures=["NoSuchModelForCausalLM"])),
         suite=SERVER),
    Case("model-unknown-architecture-factory-suite", ("ENGINEDEAD_MODEL='", "(from environment)",
                                                      "names architecture NoSuchModelForCausalLM"),
         env={"ENGINEDEAD_MODEL": "m"}, files=model(config(architectures=["NoSuchModelForCausalLM"])),
         suite=factory_call("vllm_server_factory(2)")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line(
    downstream: Downstream, no_engine: list[str], monkeypatch: pytest.MonkeyPatch, case: Case
) -> None:
    """Each bad flag, ini key or variable (and policy or model it names): one line naming the
    value and its source, before any engine."""
    assert_bad_input_is_one_line(downstream, monkeypatch, case)


# --- the same empty value, wherever it is given -----------------------------------------------

EMPTY = [
    ("enginedead_batch_sizes", "no batch sizes given"),
    ("enginedead_model", "no model directory given"),
    ("enginedead_policy", "no policy given"),
    ("enginedead_report", "no path given"),
    ("enginedead_busy_threshold", "'' is not a number"),
    ("enginedead_nodes", "'' is not a number of nodes"),
    ("enginedead_sample_interval", "'' is not a number of seconds"),
    ("enginedead_shard", "'' is not K/N"),
    ("enginedead_durations", "no path given"),
    ("enginedead_store_durations", "no path given"),
]


@pytest.mark.parametrize("source", ["flag", "env", "ini"])
@pytest.mark.parametrize(("name", "why"), EMPTY, ids=[n for n, _ in EMPTY])
def test_an_empty_value_is_refused_alike_from_every_source(
    downstream: Downstream, monkeypatch: pytest.MonkeyPatch, source: str, name: str, why: str
) -> None:
    """An empty flag, variable or ini key is the same usage error: never a silent fall-through."""
    downstream.copy(examples.PLAIN)
    args: list[str] = []
    if source == "flag":
        args.append(f"--{name.replace('_', '-')}=")
        where = f"--{name.replace('_', '-')}='' (from command line)"
    elif source == "env":
        monkeypatch.setenv(name.upper(), "")
        where = f"{name.upper()}='' (from environment)"
    else:
        downstream.pytester.makeini(f"[pytest]\n{name} =\n")
        where = f"{name} = '' (from tox.ini)"
    result = downstream.run(*args)
    line = usage_line(result)
    assert_clean(result.text)
    assert where in line and why in line, line


@pytest.mark.parametrize("source", ["flag", "env", "ini"])
def test_an_empty_switch_is_off_from_every_source(
    downstream: Downstream, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """The one exception: a switch (--enginedead-guard) reads an empty value as off."""
    downstream.copy(examples.PLAIN)
    if source == "env":
        monkeypatch.setenv("ENGINEDEAD_GUARD", "")
    elif source == "ini":
        downstream.pytester.makeini("[pytest]\nenginedead_guard =\n")
    result = downstream.run()
    assert result.ret == pytest.ExitCode.OK, result.text


# --- what is understood ------------------------------------------------------------------------


def test_a_toml_list_of_batch_sizes_is_understood(downstream: Downstream) -> None:
    """``enginedead_batch_sizes = [2, 4]`` in [tool.pytest.ini_options] means 2,4, without a warning."""
    downstream.pytester.makepyprojecttoml("[tool.pytest.ini_options]\nenginedead_batch_sizes = [2, 4]\n")
    downstream.pytester.makepyfile(
        test_sized="def test_sized(engine_batch_size):\n    assert engine_batch_size\n"
    )
    result = downstream.run("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_sized[[]bs2[]] PASSED*", "*test_sized[[]bs4[]] PASSED*"])
    assert "Warning" not in result.text


# --- issues 36 and 37: each without -n and with -n 2, alike (conventions: tests/support/badinput.py) -----

PLAN_7B = '{"stock_s":"two","slow_s_per_seq":[1],"max_tokens":"many"}'
PLAN_7C = '{"stock_s":2,"slow_s_per_seq":0.5,"bogus":1}'
PLAN_7D = '{"stock_s":2,"slow_s_per_seq":0.5,"max_tokens":"2"}'

ALIKE = [
    # the guard's cap is asked of the run's policy at the test's batch size, whoever asked for it
    Alike("flag-guard-cap-nan",
          ("the guard's cap (--enginedead-guard='1' (from command line)): policy gcap_nan: "
           "timeout_s(CPU, 2) returned nan; a deadline must be a finite number of seconds",),
          args=("--enginedead-guard", "--enginedead-policy=gcap_nan:p", "--enginedead-batch-sizes=2"),
          files=returning("gcap_nan", "float('nan')"), suite=marked("enginedead_timeout(5)", "vllm_engine"),
          kind=TEST),
    # a floor of 1 ms under the sample interval
    Alike("flag-interval-a-nanosecond",
          ("--enginedead-sample-interval='1e-9' (from command line): ", INTERVAL),
          args=("--enginedead-sample-interval=1e-9",)),
    # the variable check hands its regression run, read like a public one
    Alike("env-check-plan-not-json", ("ENGINEDEAD_CHECK_PLAN='not json' (from environment) is not JSON: "
                                      "Expecting value",),
          env={"ENGINEDEAD_CHECK_PLAN": "not json"}),
    Alike("env-check-plan-wrong-types",
          (f"ENGINEDEAD_CHECK_PLAN={PLAN_7B!r} (from environment) 'stock_s': 'two' "
           "is not a whole number",),
          env={"ENGINEDEAD_CHECK_PLAN": PLAN_7B}),
    Alike("env-check-plan-unknown-key",
          (f"ENGINEDEAD_CHECK_PLAN={PLAN_7C!r} (from environment) has unknown key(s) "
           "'bogus'; it takes stock_s, slow_s_per_seq,",),
          env={"ENGINEDEAD_CHECK_PLAN": PLAN_7C}, suite=ENGINE),
    Alike("env-check-plan-text-tokens", ("(from environment) 'max_tokens': '2' is not a whole number",),
          env={"ENGINEDEAD_CHECK_PLAN": PLAN_7D}, suite=ENGINE),
    # batch sizes within what vLLM builds (max_num_batched_tokens >= max_num_seqs)
    Alike("flag-batch-sizes-over-vllms",
          ("--enginedead-batch-sizes='99999999999' (from command line): batch size "
           "99999999999 is over 4096, the largest an offline engine takes: vLLM "
           "refuses max_num_seqs above max_num_batched_tokens",),
          args=("--enginedead-batch-sizes=99999999999",), suite=ENGINE),
    Alike("env-batch-sizes-over-a-servers",
          ("ENGINEDEAD_BATCH_SIZES='8,3000' (from environment): batch size 3000 "
           "is over 2048, the largest a server takes",),
          env={"ENGINEDEAD_BATCH_SIZES": "8,3000"}, suite=SERVER),
    Alike("ini-batch-sizes-over-vllms",
          ("enginedead_batch_sizes = '5000' (from tox.ini): batch size 5000 is over "
           "4096",),
          files={"tox.ini": "[pytest]\nenginedead_batch_sizes = 5000\n"}, suite=ENGINE),
    # the model against the harness's context, and vLLM's model types
    Alike("model-context-shorter-than-the-harness", ("--enginedead-model='", "/m' (from command line): ",
                                                     "/m/config.json: the model's context is 16 tokens",
                                                     "shorter than the harness's max_model_len 512"),
          args=("--enginedead-model=m",), files=model(config(max_position_embeddings=16)), suite=ENGINE),
    Alike("model-type-unknown", ("--enginedead-model='", "/m' (from command line): ",
                                 "/m/config.json: \"model_type\": 'nosuchtype' is known to neither vLLM"),
          args=("--enginedead-model=m",), files=model(config(model_type="nosuchtype")), suite=ENGINE),
    # the tokenizer a server loads
    Alike("model-tokenizer-cut-short", ("--enginedead-model='", "/m' (from command line): ",
                                        "/m/tokenizer.json is not valid JSON",
                                        "vLLM's API server loads it at start"),
          args=("--enginedead-model=m",), files=with_tokenizer(BAD_TOKENIZER), suite=SERVER),
    # a plugin list that leaves ours out, with the line that fixes it
    Alike("vllm-plugins-leave-ours-out",
          ("VLLM_PLUGINS='lora' (from environment) leaves out enginedead: vLLM loads "
           "only the plugins it names",
           "; fix: export VLLM_PLUGINS=lora,enginedead (or unset it)"),
          env={"VLLM_PLUGINS": "lora"}, suite=ENGINE),
]


@pytest.mark.processes
@pytest.mark.parametrize("case", ALIKE, ids=[c.id for c in ALIKE])
def test_alike_with_and_without_xdist(
    downstream: Downstream, no_engine: list[str], stub_registry: Path, private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch, case: Alike,
) -> None:
    """Each of the options' (and the variables') new refusals: one line naming the value and where it
    came from, exit 4 (a test's failure where the value is the test's), the same with -n 2, before any
    engine, nothing left."""
    assert_alike_with_and_without_xdist(downstream, stub_registry, private_tmp, monkeypatch, case)


@pytest.mark.parametrize(("files", "suite"), [
    (with_tokenizer(BAD_TOKENIZER), ENGINE),  # an offline engine loads no tokenizer
    (model(config(max_position_embeddings=16)),
     "def test_f(vllm_engine_factory):\n    vllm_engine_factory(2, max_model_len=16)\n"),
    # no engine: a batch size no engine takes is let be
    ({}, "def test_plain(engine_batch_size):\n    pass\n"),
], ids=["offline-tokenizer", "factory-own-context", "no-engine"])
def test_what_no_engine_of_the_run_needs_is_not_refused(
    downstream: Downstream, no_engine: list[str], files: dict[str, str], suite: str
) -> None:
    """The checks hold what the run's engines will use, no more: a tokenizer only servers load, the
    harness's context only the fixtures' engines start with (a factory gives its own), a batch size
    only where an engine starts at it (collected only: nothing starts)."""
    for name, text in files.items():
        (downstream.path / name).parent.mkdir(parents=True, exist_ok=True)
        (downstream.path / name).write_text(str(text))
    (downstream.path / "test_case.py").write_text(suite)
    args = ["--enginedead-model=m"] if files else ["--enginedead-batch-sizes=99999999999"]
    result = downstream.run(*args, "--collect-only")
    assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
    assert_clean(result.text)
