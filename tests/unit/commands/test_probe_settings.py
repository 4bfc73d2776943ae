"""``enginedead probe-settings``: bad input refused before any server starts; the old name still
taken, with a line that names the new one."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_enginedead import command
from pytest_enginedead.harness.probing import trials
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL


@pytest.mark.parametrize(("argv", "says"), [
    (["--window", "0"], "argument --window: '0' must be above 0"),
    (["--hang-s", "soon"], "argument --hang-s: 'soon' is not a number of seconds"),
    (["--setting", "mine=5/2"], "argument --setting: 'mine=5/2' is not NAME=PERIOD/TIMEOUT/THRESHOLD"),
    (["--setting", "mine=5/60/3"], "argument --setting: 'mine=5/60/3': needs 0 < PERIOD <= 3600"),
    (["--setting", "mine=a/1/3"], "argument --setting: 'mine=a/1/3': PERIOD and TIMEOUT are seconds"),
    (["--model", "/no/such/model"], "argument --model: model directory '/no/such/model' does not exist"),
])
def test_probe_settings_bad_input_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before any server starts: a start would need vLLM, which this must not reach."""
    monkeypatch.setattr(trials, "run_trials", lambda *a, **k: pytest.fail("a server was started"))
    with pytest.raises(SystemExit) as info:
        command.main(["probe-settings", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("enginedead probe-settings: error: ") and says in err[0], err


def test_probe_settings_refuses_a_model_without_a_tokenizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil


    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(Path(BUNDLED_MODEL) / "config.json", model / "config.json")
    monkeypatch.setattr(trials, "run_trials", lambda *a, **k: pytest.fail("a server was started"))
    assert command.main(["probe-settings", "--model", str(model)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no tokenizer.json: the probes send text" in err[0], err


@pytest.mark.parametrize(("files", "env", "says"), [
    ({"tokenizer.json": '{"version": "1.0", "model": {'}, {}, "tokenizer.json is not valid JSON: Expecting"),
    ({}, {"VLLM_PLUGINS": "lora"}, "VLLM_PLUGINS='lora' (from environment) leaves out enginedead"),
], ids=["tokenizer-cut-short", "vllm-plugins"])
def test_probe_settings_refuses_what_its_servers_could_not_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str], env: dict[str, str], says: str,
) -> None:
    """A tokenizer its servers would load and fail on, a plugin list that leaves ours out: one line,
    exit 2, before any server starts."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(BUNDLED_MODEL, model)
    for name, text in files.items():
        (model / name).write_text(text)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(trials, "run_trials", lambda *a, **k: pytest.fail("a server was started"))
    assert command.main(["probe-settings", "--model", str(model)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("enginedead probe-settings: error: ") and says in err[0], err


def test_the_old_name_runs_the_command_and_says_its_new_name(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``enginedead probes`` was one letter from ``enginedead probe``: it still runs, and says so."""
    monkeypatch.setattr(trials, "run_trials", lambda *a, **k: pytest.fail("a server was started"))
    with pytest.raises(SystemExit) as info:
        command.main(["probes", "--window", "0"])
    assert info.value.code == 2
    first, refusal = capsys.readouterr().err.strip().splitlines()
    assert first == ("enginedead: `enginedead probes` is now `enginedead probe-settings` (the old name goes "
                     "in 0.4.0)")
    assert refusal.startswith("enginedead probe-settings: error: argument --window: '0' must be above 0")
