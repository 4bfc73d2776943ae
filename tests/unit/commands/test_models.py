"""``enginedead models``: the presets and where each lies, for vLLM's own commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_enginedead.logic.inputs.modelconfig import presets
from tests.support.downstream import enginedead


@pytest.mark.processes
def test_a_preset_by_name_prints_its_directory_alone() -> None:
    """What ``--model "$(enginedead models tiny-llama)"`` needs: one line, the directory with its
    config.json (and the tokenizer vLLM's server loads)."""
    done = enginedead("models", "tiny-llama")
    assert done.returncode == 0 and done.stderr == ""
    (line,) = done.stdout.splitlines()
    assert line == presets()["tiny-llama"]
    assert (Path(line) / "config.json").is_file() and (Path(line) / "tokenizer.json").is_file()


@pytest.mark.processes
def test_the_list_names_each_preset_with_its_directory() -> None:
    done = enginedead("models")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    for name, directory in presets().items():
        i = next(i for i, ln in enumerate(lines) if ln.startswith(f"{name} "))
        assert lines[i + 1].strip() == directory
    assert lines[-1].startswith("use: --model NAME")
    listed = json.loads(enginedead("models", "--json").stdout)
    assert {n: v["directory"] for n, v in listed.items()} == presets()


@pytest.mark.processes
def test_an_unknown_name_is_one_line_and_exit_2() -> None:
    done = enginedead("models", "tiny-lama")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("enginedead models: error: no preset is named 'tiny-lama'; the presets: "
                           f"{', '.join(presets())}\n")
