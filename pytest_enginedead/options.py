"""The plugin's options: one definition each, and the run's settings resolved from them.

Precedence: marker > command line > environment > ini > default.  A bad value is a
``pytest.UsageError`` that names the value and where it came from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import compat
from .liveness import DEFAULT_BUSY_THRESHOLD, DEFAULT_INTERVAL_S, LivenessSettings
from .policy import PolicyError, PolicyLike, TimeoutPolicy, load_policy, policy_name

BUNDLED_MODEL = str(Path(__file__).parent / "models" / "tiny-llama")
DEFAULT_BATCH_SIZES = (8, 64)


class BadValue(ValueError):
    """A value that does not parse; the message says what is wrong with it."""


def parse_batch_sizes(raw: str) -> tuple[int, ...]:
    """``"8,64"`` → ``(8, 64)``: positive integers, no empty items."""
    text = raw.strip()
    if not text:
        raise BadValue("no batch sizes given; use a comma list like 8,64")
    sizes = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise BadValue(f"empty item in {raw!r}; use a comma list like 8,64")
        try:
            n = int(item)
        except ValueError:
            raise BadValue(f"{item!r} is not a whole number; use a comma list like 8,64") from None
        if n < 1:
            raise BadValue(f"batch size {n} must be at least 1")
        sizes.append(n)
    return tuple(dict.fromkeys(sizes))


def check_batch_sizes(values: tuple[Any, ...]) -> tuple[int, ...]:
    """Marker arguments: positive ints."""
    if not values:
        raise BadValue("needs at least one batch size")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BadValue(f"batch size {v!r} is not a positive integer")
    return tuple(dict.fromkeys(values))


def validate_model(path: str) -> str:
    """A HF-style model directory with a readable ``config.json`` object."""
    p = Path(path).expanduser()
    if not p.exists():
        raise BadValue(f"model directory {str(p)!r} does not exist")
    if not p.is_dir():
        raise BadValue(f"model path {str(p)!r} is not a directory")
    config = p / "config.json"
    if not config.is_file():
        raise BadValue(f"model directory {str(p)!r} has no config.json")
    try:
        data = json.loads(config.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise BadValue(f"cannot read {config}: {exc}") from None
    except ValueError as exc:
        raise BadValue(f"{config} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadValue(f"{config} must hold a JSON object, not {type(data).__name__}")
    _architectures(data, config)
    return str(p.resolve())


def _architectures(data: dict[str, Any], config: Path) -> list[str]:
    archs = data.get("architectures", [])
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise BadValue(f'{config}: "architectures" must be a list of class names')
    return archs


def read_architectures(path: str) -> list[str]:
    """The ``architectures`` a model's config.json names."""
    config = Path(path)
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise BadValue(f"cannot read {config}: {exc}") from None
    if not isinstance(data, dict):
        raise BadValue(f"{config} must hold a JSON object")
    return _architectures(data, config)


def architecture_problem(model: str) -> str | None:
    """Why the installed vLLM cannot build this model's architecture, in one line, or None."""
    path = os.path.join(model, "config.json")
    try:
        archs = read_architectures(path)
    except BadValue as exc:
        return str(exc)
    try:
        known = compat.known_architectures()
    except Exception:
        return None  # cannot ask this vLLM; the engine start will say
    unknown = [a for a in archs if a not in known]
    if unknown or not archs:
        return (
            f"{path} names architecture {', '.join(unknown) or '(none)'}, which vLLM "
            f"{compat.installed_version()} does not know; use one it supports, e.g. LlamaForCausalLM"
        )
    return None


def check_architectures(model: str, source: str) -> None:
    """An architecture the installed vLLM lacks is a usage error, said once, before any engine starts."""
    problem = architecture_problem(model)
    if problem:
        raise pytest.UsageError(f"enginedead: {problem} (--enginedead-model, from {source})")


def validate_output_path(raw: str) -> str:
    """A file path we can write later: checked now, so no result is lost at the end."""
    text = raw.strip()
    if not text:
        raise BadValue("no path given")
    try:
        path = Path(text).expanduser()
    except RuntimeError as exc:  # ~user that does not exist
        raise BadValue(f"{text!r} cannot be expanded: {exc}") from None
    if path.is_dir():
        raise BadValue(f"{str(path)!r} is a directory; give a file path")
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise BadValue(f"{str(path)!r} cannot be created: {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK):
        raise BadValue(f"{str(path)!r} cannot be created: {str(parent)!r} is not writable")
    if len(path.name.encode()) > 255:
        raise BadValue(f"{path.name[:40]!r}... is too long a file name (at most 255 bytes)")
    return str(path)


def parse_fraction(raw: str) -> float:
    """``"0.05"`` or ``"5%"`` → 0.05 (share of one core)."""
    text = raw.strip()
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise BadValue(f"{raw!r} is not a number; use a share of one core like 0.05 or 5%") from None
    if not 0 < value <= 64:
        raise BadValue(f"{raw!r} must be above 0 (a share of one core, like 0.05)")
    return value


def parse_switch(raw: str) -> bool:
    """``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``."""
    text = raw.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise BadValue(f"{raw!r} is not a switch; use 1 or 0")


def parse_seconds(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise BadValue(f"{raw!r} is not a number of seconds") from None
    if not 0 < value <= 60:
        raise BadValue(f"{raw!r} must be above 0 and at most 60 seconds")
    return value


@dataclass(frozen=True)
class Option:
    name: str  # ini key; the flag is --name with - for _
    help: str
    default: str | None
    parse: Callable[[str], Any]
    metavar: str
    #: a switch: ``--flag`` alone turns it on (ini / env take 1 or 0)
    switch: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return self.name.upper()


OPTIONS = (
    Option(
        "enginedead_batch_sizes",
        "Comma list of batch sizes the engine fixtures run at (default 8,64).",
        "8,64", parse_batch_sizes, "N,N",
    ),
    Option(
        "enginedead_model",
        "Model directory for engine fixtures: a HF-style dir, config.json is enough "
        "(dummy weights). Default: the bundled tiny Llama.",
        None, validate_model, "DIR",
    ),
    Option(
        "enginedead_policy",
        "Timeout policy: reference, vllm-stock (vLLM's fixed deadline, shows the bug) "
        "or module:attr (an object with timeout_s). Default: reference.",
        None, str.strip, "POLICY",
    ),
    Option(
        "enginedead_report",
        "Write the JSON report of engines, steps and verdicts to this path.",
        None, validate_output_path, "PATH",
    ),
    Option(
        "enginedead_guard",
        "Start every engine with the guard on: vLLM's deadline becomes the point of "
        "suspicion, a busy worker gets up to the policy's cap, a hung one ends after 60 s "
        "(marker enginedead_guard for one test).",
        "0", parse_switch, "", switch=True,
    ),
    Option(
        "enginedead_busy_threshold",
        "CPU use, as a share of one core over the sample window, above which a live "
        "engine process counts as computing (default 0.05 = 5%).",
        str(DEFAULT_BUSY_THRESHOLD), parse_fraction, "SHARE",
    ),
    Option(
        "enginedead_sample_interval",
        "Seconds between liveness samples of engine processes (default 0.1).",
        str(DEFAULT_INTERVAL_S), parse_seconds, "SECONDS",
    ),
)


def addoptions(parser: pytest.Parser) -> None:
    group = parser.getgroup("enginedead", "false EngineDeadError detection (pytest-enginedead)")
    for opt in OPTIONS:
        help_text = f"{opt.help} Env: {opt.env}."
        # argparse %-formats help text; the ini help is printed as is
        if opt.switch:
            group.addoption(opt.flag, dest=opt.name, action="store_const", const="1", default=None,
                            help=help_text.replace("%", "%%"))
        else:
            group.addoption(opt.flag, dest=opt.name, metavar=opt.metavar, default=None,
                            help=help_text.replace("%", "%%"))
        parser.addini(opt.name, help=help_text, default=None)


@dataclass(frozen=True)
class Value:
    """An option's parsed value, where it came from, and how the user wrote it there."""

    value: Any
    source: str  # "command line", "environment", the ini file's name, "default"
    where: str  # e.g. "--enginedead-policy='x'", "ENGINEDEAD_POLICY='x'", "enginedead_policy = 'x'"


def resolve(config: pytest.Config, opt: Option) -> Value:
    """The option's value from the first source that sets it, parsed, or UsageError."""
    raw: str | None = config.getoption(opt.name, default=None)
    source = "command line"
    where = f"{opt.flag}={raw!r}"
    if raw is None and os.environ.get(opt.env) is not None:
        raw, source = os.environ[opt.env], "environment"
        where = f"{opt.env}={raw!r}"
    if raw is None:
        ini = config.getini(opt.name)
        if ini not in (None, "", []):
            raw = ini if isinstance(ini, str) else str(ini)
            source = config.inipath.name if config.inipath else "ini"
            where = f"{opt.name} = {raw!r}"
            if opt.name == "enginedead_model" and config.inipath and not os.path.isabs(raw):
                raw = str(config.inipath.parent / raw)
    if raw is None:
        if opt.default is None:
            return Value(None, "default", "")
        raw, source, where = opt.default, "default", repr(opt.default)
    try:
        return Value(opt.parse(raw), source, where)
    except BadValue as exc:
        raise pytest.UsageError(f"enginedead: {where} (from {source}): {exc}") from None


@dataclass(frozen=True)
class Settings:
    """The run's resolved options, each with where it came from."""

    batch_sizes: tuple[int, ...]
    model: str
    model_source: str
    policy: PolicyLike
    policy_name: str
    policy_source: str
    #: the policy as a spec another process can load (the guard's cap), when it is one
    policy_spec: str | None
    report: str | None
    guard: bool
    liveness: LivenessSettings
    vllm_version: str | None


def resolve_settings(config: pytest.Config) -> Settings:
    """Every option from its highest-precedence source, parsed once; UsageError on a bad one."""
    get = {o.name: resolve(config, o) for o in OPTIONS}
    policy, policy_name, policy_source = _resolve_policy(config, get["enginedead_policy"])
    chosen = get["enginedead_policy"].value
    model = get["enginedead_model"]
    return Settings(
        batch_sizes=get["enginedead_batch_sizes"].value,
        model=model.value or BUNDLED_MODEL,
        model_source=model.source if model.value else "bundled",
        policy=policy,
        policy_name=policy_name,
        policy_source=policy_source,
        policy_spec=chosen.strip() if chosen else ("reference" if policy_source == "default" else None),
        report=get["enginedead_report"].value,
        guard=get["enginedead_guard"].value,
        liveness=LivenessSettings(
            threshold=get["enginedead_busy_threshold"].value,
            interval_s=get["enginedead_sample_interval"].value,
        ),
        vllm_version=compat.installed_version(),
    )


def _resolve_policy(config: pytest.Config, chosen: Value) -> tuple[PolicyLike, str, str]:
    """(policy, its name, where it came from): the option, else the conftest hook, else reference."""
    if chosen.value is not None:
        try:
            policy = load_policy(chosen.value, [str(config.rootpath), os.getcwd()])
        except PolicyError as exc:
            raise pytest.UsageError(f"enginedead: {chosen.where} (from {chosen.source}): {exc}") from None
        return policy, policy_name(policy, chosen.value), chosen.source
    try:
        hooked = config.hook.pytest_enginedead_policy(config=config)
    except Exception as exc:
        raise pytest.UsageError(
            f"enginedead: the pytest_enginedead_policy hook raised {type(exc).__name__}: {exc}"
        ) from None
    if hooked is None:
        return TimeoutPolicy.reference(), "reference", "default"
    if not callable(getattr(hooked, "timeout_s", None)):
        raise pytest.UsageError(
            "enginedead: pytest_enginedead_policy returned "
            f"{type(hooked).__name__}, which has no callable timeout_s"
        )
    return hooked, policy_name(hooked, "hook"), "pytest_enginedead_policy hook"
