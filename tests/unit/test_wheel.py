"""What ``pip install`` gives a user, with no checkout: the model presets inside the wheel, and
the wheel installed in a fresh venv.

The wheel is built from a copy of the package (``pip wheel --no-build-isolation``: this
interpreter's setuptools, no index) and unpacked as an install would lay it out; the
presets resolve by name from there, and the shrunk MoE's tokenizer (symlinks in the
repository) is real files.  Then pip installs it into a new venv (its dependencies, pytest and
the rest, are this interpreter's, seen through a ``.pth`` line: no index is needed), where the
console script, the pytest plugin (loaded by its entry point) and the presets work from a
directory with no checkout.  (The lint stage builds the sdist and the wheel with
``python -m build`` and checks them with ``twine check --strict``.)
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
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout."""
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
    (built,) = (work / "dist").glob("pytest_enginedead-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, unpacked as site-packages would hold it."""
    site = tmp_path_factory.mktemp("site")
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
    monitoring = source / "monitoring"  # the alert rules and the dashboard, as the repository has them
    for path in monitoring.iterdir():
        assert (installed / "pytest_enginedead" / "monitoring" / path.name).read_bytes() == path.read_bytes()


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


@pytest.mark.processes
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


# --- the wheel installed in a fresh venv ----------------------------------------------------------


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the wheel installed by pip (entry points, console script, data files), and
    this interpreter's packages (pytest, psutil, pytest-xdist, pytest-timeout; vLLM where it is)
    behind its own on the path."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
         "--no-cache-dir", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300, check=False, env=_clean_env(),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (root / "bin" / "enginedead").is_file(), "pip installed nothing into the new venv"
    # then the dependencies: this interpreter's (written after the install, or pip would take this
    # checkout's own editable install for the wheel it was asked to install)
    import sysconfig

    theirs = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(purelib) / "zz-borrowed.pth").write_text("".join(f"{p}\n" for p in sorted(theirs)))
    return root


def _clean_env() -> dict[str, str]:
    """This environment without what would put this checkout (or its build) on the new venv's path."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS")}


def _in(venv: Path, cwd: Path, *cmd: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = _clean_env()
    environ.update(env, PATH=f"{venv / 'bin'}{os.pathsep}{environ.get('PATH', '')}")
    return subprocess.run(list(cmd), cwd=cwd, env=environ, capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.mark.processes
def test_the_wheel_installs_in_a_fresh_venv_and_its_console_script_runs(venv: Path, tmp_path: Path) -> None:
    version = _in(venv, tmp_path, str(venv / "bin" / "enginedead"), "--version")
    assert version.returncode == 0, version.stderr[-3000:]
    assert version.stdout.startswith(f"enginedead (pytest-enginedead) {pytest_enginedead.__version__}")
    listed = _in(venv, tmp_path, str(venv / "bin" / "enginedead"), "calibrate", "--list-models")
    assert listed.returncode == 0
    assert [ln.split()[0] for ln in listed.stdout.splitlines()[:-1]] == list(PRESETS)
    # the entry points are the venv's own: pytest's plugin, vLLM's general plugin, the console script
    code = ("import importlib.metadata as m, json; d = m.distribution('pytest-enginedead'); "
            "eps = sorted((e.group, e.name, e.value) for e in d.entry_points); "
            "print(json.dumps([str(d.locate_file('')), eps]))")
    where, entry_points = json.loads(_in(venv, tmp_path, str(venv / "bin" / "python"), "-c", code).stdout)
    assert Path(where).resolve().is_relative_to(venv.resolve())
    assert entry_points == [["console_scripts", "enginedead", "pytest_enginedead.command:main"],
                            ["pytest11", "enginedead", "pytest_enginedead.plugin"],
                            ["vllm.general_plugins", "enginedead", "pytest_enginedead.inside:register"]]


USES_THE_PLUGIN = """
import pytest_enginedead


def test_the_policy_is_the_plugins(enginedead_policy):
    assert enginedead_policy.name == "reference"
    print("PLUGIN " + pytest_enginedead.__file__)
"""


@pytest.mark.processes
@pytest.mark.parametrize("autoload", [True, False], ids=["autoloaded", "autoload-disabled"])
def test_the_installed_plugin_loads_by_its_entry_point(venv: Path, tmp_path: Path, autoload: bool) -> None:
    """Installed, the plugin loads in the venv's pytest runs by itself (like pytest-xdist); under
    ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` ``-p enginedead`` loads it."""
    (tmp_path / "test_policy.py").write_text(USES_THE_PLUGIN)
    args = [str(venv / "bin" / "python"), "-m", "pytest", "-s", "-p", "no:cacheprovider", "test_policy.py"]
    env = {} if autoload else {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if not autoload:
        refused = _in(venv, tmp_path, *args, **env)  # no plugin: the fixture does not exist
        assert refused.returncode == 1 and "fixture 'enginedead_policy' not found" in refused.stdout
        args += ["-p", "enginedead"]
    done = _in(venv, tmp_path, *args, **env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (line,) = [ln for ln in done.stdout.splitlines() if "PLUGIN " in ln]
    assert Path(line.split("PLUGIN ", 1)[1]).resolve().is_relative_to(venv.resolve())
    assert "enginedead: policy=reference (default)" in done.stdout  # a test of the plugin's: the header
