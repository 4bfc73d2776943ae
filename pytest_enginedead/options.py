"""The plugin's options: one definition each, resolved with the source of every value.

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

from .liveness import DEFAULT_BUSY_THRESHOLD, DEFAULT_INTERVAL_S

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
        None, str.strip, "PATH",
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
        group.addoption(
            opt.flag, dest=opt.name, metavar=opt.metavar, default=None,
            help=help_text.replace("%", "%%"),
        )
        parser.addini(opt.name, help=help_text, default=None)


@dataclass(frozen=True)
class Value:
    value: Any
    raw: str | None
    source: str  # "command line", "environment", "ini file X", "default"


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
            inifile = config.inipath.name if config.inipath else "ini"
            source = f"{inifile}"
            where = f"{opt.name} = {raw!r}"
            if opt.name == "enginedead_model" and config.inipath and not os.path.isabs(raw):
                raw = str(config.inipath.parent / raw)
    if raw is None:
        if opt.default is None:
            return Value(None, None, "default")
        raw, source, where = opt.default, "default", repr(opt.default)
    try:
        return Value(opt.parse(raw), raw, source)
    except BadValue as exc:
        raise pytest.UsageError(f"enginedead: {where} (from {source}): {exc}") from None

