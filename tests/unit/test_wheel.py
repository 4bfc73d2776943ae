"""What ``pip install`` gives a user, with no checkout: the model presets inside the wheel.

The wheel is built from a copy of the package (``pip wheel --no-build-isolation``: this
interpreter's setuptools, no index) and unpacked as an install would lay it out; the
presets resolve by name from there, and the shrunk MoE's tokenizer (symlinks in the
repository) is real files.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pytest_enginedead
from pytest_enginedead.logic.inputs.modelconfig import presets

ROOT = Path(pytest_enginedead.__file__).resolve().parent.parent
PRESETS = ("gemma-4-26b-a4b", "gemma-4-moe-mini", "tiny-llama")


def _setuptools_major() -> int:
    if importlib.util.find_spec("setuptools") is None:
        return 0
    from importlib.metadata import version

    return int(version("setuptools").split(".")[0])


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, unpacked as site-packages would hold it."""
    if _setuptools_major() < 77:
        pytest.skip("building the wheel needs setuptools >= 77 here (pyproject.toml's build-system)")
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "pytest_enginedead", src / "pytest_enginedead", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-q",
         "-w", str(work / "dist"), str(src)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (work / "dist").glob("pytest_enginedead-*.whl")
    site = work / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def test_the_wheel_carries_every_module_of_the_package(installed: Path) -> None:
    """Every ``.py`` file of the checkout's package but the models' tool (compat/ was once missing
    from a hand-kept list: the installed ``enginedead`` could not start)."""
    source = ROOT / "pytest_enginedead"
    mine = {p.relative_to(source).as_posix() for p in source.rglob("*.py")
            if "__pycache__" not in p.parts and p.parent.name != "models"}
    shipped = {p.relative_to(installed / "pytest_enginedead").as_posix()
               for p in (installed / "pytest_enginedead").rglob("*.py")}
    assert mine - shipped == set()
    for data in ("py.typed", "report.schema.json"):
        assert (installed / "pytest_enginedead" / data).is_file(), data


def test_the_wheel_carries_every_preset_with_real_files(installed: Path) -> None:
    models = installed / "pytest_enginedead" / "models"
    assert sorted(p.name for p in models.iterdir() if (p / "config.json").is_file()) == list(PRESETS)
    in_repo = presets()
    for name in PRESETS:
        mine = sorted(p.name for p in Path(in_repo[name]).iterdir())
        shipped = sorted(p.name for p in (models / name).iterdir())
        assert shipped == mine, name
        for file in mine:
            path = models / name / file
            assert not path.is_symlink() and path.read_bytes() == (Path(in_repo[name]) / file).read_bytes()


def test_a_preset_resolves_by_name_from_the_installed_package(installed: Path, tmp_path: Path) -> None:
    """From a directory with no checkout: the names resolve to the installed package's models."""
    code = (
        "import json, sys, pytest_enginedead\n"
        "from pytest_enginedead.logic.inputs.modelconfig import validate_model\n"
        "from pytest_enginedead.command import build_parser\n"
        f"found = {{n: validate_model(n) for n in {list(PRESETS)!r}}}\n"
        "build_parser()\n"
        "files = [getattr(m, '__file__', None) or '' for n, m in list(sys.modules.items())\n"
        "         if n == 'pytest_enginedead' or n.startswith('pytest_enginedead.')]\n"
        "print(json.dumps([files, found]))"
    )
    env = {**os.environ, "PYTHONPATH": str(installed)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    files, resolved = json.loads(done.stdout)
    # every module the console script's parser loads came from the wheel, none from this checkout
    assert len(files) > 20 and [f for f in files if not Path(f).is_relative_to(installed)] == []
    for name, directory in resolved.items():
        assert Path(directory) == installed / "pytest_enginedead" / "models" / name
    listed = subprocess.run([sys.executable, "-m", "pytest_enginedead.command", "calibrate", "--list-models"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert [ln.split()[0] for ln in listed.stdout.splitlines()[:-1]] == list(PRESETS)
