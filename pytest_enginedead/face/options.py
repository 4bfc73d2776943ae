"""The plugin's options: one definition each, and the run's settings resolved from them.

Precedence: marker > command line > environment > ini > default.  A bad value is a
``pytest.UsageError`` that names the value and where it came from.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .. import compat
from ..harness.liveness import DEFAULT_BUSY_THRESHOLD, DEFAULT_INTERVAL_S, LivenessSettings
from ..logic.policy import PolicyError, PolicyLike, TimeoutPolicy, load_policy, policy_name
from ..logic.sharding import Shard, ShardError, durations_path
from ..logic.sharding import parse_shard as _parse_shard

BUNDLED_MODEL = str(Path(__file__).parent.parent / "models" / "tiny-llama")
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


def _expand(text: str) -> Path:
    """``~`` and ``~user`` expanded; a path the OS cannot take is a BadValue."""
    if "\0" in text:
        raise BadValue(f"{text!r} contains a NUL byte")
    try:
        return Path(text).expanduser()
    except RuntimeError:  # ~user that does not exist, or no home directory
        head = text.split(os.sep, 1)[0]
        raise BadValue(f"{text!r} cannot be expanded: no home directory for {head!r}") from None


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a path the OS refuses to look up (too long, a loop) is a BadValue."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        shown = str(path) if len(str(path)) <= 80 else str(path)[:60] + "..."
        raise BadValue(f"{shown!r} cannot be used: {exc.strerror or exc}") from None
    return True


def validate_model(path: str) -> str:
    """A HF-style model directory with a readable ``config.json`` object (resolved).

    The option's parser: cheap enough for every run.  ``model_problem`` does this and
    the rest, once an engine is planned.
    """
    if not path.strip():
        raise BadValue("no model directory given; give a directory holding a config.json")
    p = _expand(path)
    if not _exists(p):
        raise BadValue(f"model directory {str(p)!r} does not exist")
    if not p.is_dir():
        raise BadValue(f"model path {str(p)!r} is not a directory")
    config = p / "config.json"
    if not config.is_file():
        raise BadValue(f"model directory {str(p)!r} has no config.json")
    _architectures(read_config(config), config)
    return str(p.resolve())


def read_config(config: Path) -> dict[str, Any]:
    """A model's ``config.json`` as a dict; anything the JSON parser cannot hold is a BadValue."""
    try:
        raw = config.read_bytes()
    except OSError as exc:
        raise BadValue(f"cannot read {config}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadValue(f"{config} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise BadValue(f"{config} nests too deeply for Python's JSON parser") from None
    except ValueError as exc:  # malformed, or a number too long to convert
        raise BadValue(f"{config} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadValue(f"{config} must hold a JSON object, not {type(data).__name__}")
    return data


def _architectures(data: dict[str, Any], config: Path) -> list[str]:
    archs = data.get("architectures", [])
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise BadValue(f'{config}: "architectures" must be a list of class names')
    return archs


#: config.json keys every engine needs as whole numbers >= 1, where the config gives them
SIZE_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "max_position_embeddings",
)
#: above this a size cannot be a tensor dimension vLLM allocates (int32 indexing)
MAX_SIZE = 2**31 - 1


def config_problem(data: dict[str, Any], config: Path | str, prefix: str = "") -> str | None:
    """Why vLLM could not build a model from this config, in one line, or None.

    Checks what a weightless engine needs before it starts: the sizes are whole
    numbers >= 1, the hidden size splits evenly into attention heads (when no
    ``head_dim`` says otherwise), the query heads into key/value heads.  A nested
    ``text_config`` (multimodal configs) is checked the same way.
    """
    for key in SIZE_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            return f'{config}: "{prefix}{key}": {value!r} is not a whole number'
        if value < 1:
            return f'{config}: "{prefix}{key}": {value!r} must be at least 1'
        if value > MAX_SIZE:
            return f'{config}: "{prefix}{key}": {value!r} is too large (at most {MAX_SIZE})'
    hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
    kv_heads = data.get("num_key_value_heads")
    if data.get("head_dim") is None and hidden is not None and heads is not None and hidden % heads:
        return (
            f'{config}: "{prefix}hidden_size" {hidden} does not split into "{prefix}num_attention_heads" '
            f'{heads} (no "{prefix}head_dim" is given)'
        )
    if heads is not None and kv_heads is not None and heads % kv_heads:
        return (
            f'{config}: "{prefix}num_attention_heads" {heads} is not a multiple of '
            f'"{prefix}num_key_value_heads" {kv_heads}'
        )
    text = data.get("text_config")
    if isinstance(text, dict) and not prefix:
        return config_problem(text, config, "text_config.")
    return None


def model_problem(model: str, architecture: bool = True) -> str | None:
    """Why no engine can run on this model directory, in one line, or None.

    The one model check, called from every door (the options, the factories, the
    ``enginedead`` command, the xdist controller), each of which puts its own name for
    the value in front: the directory and its ``config.json`` (``validate_model``), the
    sizes (``config_problem``), and, with ``architecture``, whether the installed vLLM
    knows the architecture it names (vLLM's registry is imported for that, once per
    process; without vLLM that part is skipped).
    """
    try:
        config = Path(validate_model(model)) / "config.json"
        data = read_config(config)
    except BadValue as exc:
        return str(exc)
    problem = config_problem(data, config)
    if problem or not architecture:
        return problem
    return _architecture_problem(_architectures(data, config), config)


def _architecture_problem(archs: list[str], config: Path) -> str | None:
    """Why the installed vLLM cannot build these architectures, in one line, or None."""
    if compat.vllm_missing_reason() is not None:
        return None  # no vLLM here to ask: no engine will start either
    try:
        unknown = [a for a in archs if not compat.knows_architecture(a)]
    except Exception:
        return None  # no vLLM to ask (or it cannot say): the engine start will tell
    if unknown or not archs:
        return (
            f"{config} names architecture {', '.join(unknown) or '(none)'}, which vLLM "
            f"{compat.installed_version()} does not know; use one it supports, e.g. LlamaForCausalLM"
        )
    return None


def model_label(model: str, source: str) -> str:
    """How a message names the run's model: as the user set it, and where."""
    if source == "command line":
        return f"--enginedead-model={model!r}"
    if source == "environment":
        return f"ENGINEDEAD_MODEL={model!r}"
    if source == "bundled":
        return f"the bundled model {model!r}"
    return f"enginedead_model = {model!r}"


def check_model(model: str, source: str) -> None:
    """A model no engine can run is a usage error, said once, before any engine starts.

    ``source`` is where the run's model came from (``Settings.model_source``).
    """
    problem = model_problem(model)
    if problem:
        raise pytest.UsageError(f"enginedead: {model_label(model, source)} (from {source}): {problem}")


def validate_output_path(raw: str) -> str:
    """An output path as text: not empty, ``~`` expanded, within the lengths the OS takes.

    Whether it can take the output is proven when it is claimed (``outputs.claim``),
    at the start of the run, by creating it for real.
    """
    text = raw.strip()
    if not text:
        raise BadValue("no path given")
    path = _expand(text)
    if len(os.fsencode(path.name)) > 255:
        raise BadValue(f"{path.name[:40]!r}... is too long a file name (at most 255 bytes)")
    if len(os.fsencode(str(path.absolute()))) >= 4096:
        raise BadValue(f"{str(path)[:40]!r}... is too long a path (at most 4095 bytes)")
    return str(path)


#: the busy threshold's largest value: a share of one core, so 64 means 64 cores at work
MAX_BUSY_THRESHOLD = 64


def parse_fraction(raw: str) -> float:
    """``"0.05"`` or ``"5%"`` → 0.05 (share of one core)."""
    text = raw.strip()
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise BadValue(f"{raw!r} is not a number; use a share of one core like 0.05 or 5%") from None
    if not 0 < value <= MAX_BUSY_THRESHOLD:
        raise BadValue(
            f"{raw!r} must be above 0 and at most {MAX_BUSY_THRESHOLD} "
            "(a share of one core, like 0.05 or 5%; 64 = 64 cores busy)"
        )
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


def parse_shard(raw: str) -> Shard:
    """``"1/2"``: shard K of N, 1 <= K <= N."""
    try:
        return _parse_shard(raw)
    except ShardError as exc:
        raise BadValue(str(exc)) from None


def validate_input_path(raw: str) -> str:
    """An input file's path as text: not empty, ``~`` expanded (read when it is used)."""
    text = raw.strip()
    if not text:
        raise BadValue("no path given")
    return str(_expand(text))


def parse_policy(raw: str) -> str:
    """A policy spec as given: ``reference``, ``vllm-stock`` or ``module:attr`` (loaded later)."""
    text = raw.strip()
    if not text:
        raise BadValue("no policy given; use reference, vllm-stock or module:attr")
    return text


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
        None, parse_policy, "POLICY",
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
        "enginedead_shard",
        "Run shard K of N (e.g. 1/2) of the collected tests: every test in exactly one shard, "
        "the tests sharing an engine configuration in the same one (one start each), balanced "
        "by --enginedead-durations when given, else by tests and engine starts.",
        None, parse_shard, "K/N",
    ),
    Option(
        "enginedead_durations",
        "Test durations to balance shards by: a file written by --enginedead-store-durations "
        "on the same vLLM release; {vllm} in the path becomes the installed release.",
        None, validate_input_path, "PATH",
    ),
    Option(
        "enginedead_store_durations",
        "Write each test's duration (setup + call + teardown) to this path at the end of the "
        "run, for --enginedead-durations; {vllm} in the path becomes the installed release.",
        None, validate_output_path, "PATH",
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
    """The option's value from the first source that sets it, parsed, or UsageError.

    An empty value is a value: given on the command line, in the environment or in
    the ini file, it is parsed like any other (a switch reads it as off; every other
    option refuses it), so an empty setting never silently falls through to another.
    """
    raw: str | None = config.getoption(opt.name, default=None)
    source = "command line"
    where = f"{opt.flag}={raw!r}"
    if raw is None and os.environ.get(opt.env) is not None:
        raw, source = os.environ[opt.env], "environment"
        where = f"{opt.env}={raw!r}"
    if raw is None:
        found = _ini(config, opt)
        if found is not None:
            raw, source, where = found
            if (opt.name == "enginedead_model" and config.inipath and raw.strip()
                    and not raw.startswith("~") and not os.path.isabs(raw)):
                raw = str(config.inipath.parent / raw)
    if raw is None:
        if opt.default is None:
            return Value(None, "default", "")
        raw, source, where = opt.default, "default", repr(opt.default)
    try:
        return Value(opt.parse(raw), source, where)
    except BadValue as exc:
        raise pytest.UsageError(f"enginedead: {where} (from {source}): {exc}") from None


#: what pytest 9 warns of when an ini value is a TOML list for a string option; we read lists ourselves
_NOT_A_STRING = getattr(pytest, "PytestRemovedIn10Warning", DeprecationWarning)


def _ini(config: pytest.Config, opt: Option) -> tuple[str, str, str] | None:
    """``(raw, source, where)`` from the ini file, or None when it does not set ``opt``.

    ``[tool.pytest.ini_options]`` in pyproject.toml may hold a TOML list or number:
    a list of batch sizes is read as the comma list it means; a list anywhere else
    is refused, as is a value pytest's own ``[tool.pytest]`` table refuses.
    """
    overrides = config.getoption("override_ini", default=None) or []
    if any(str(o).split("=", 1)[0].strip() == opt.name for o in overrides):
        source = "-o/--override-ini"
    else:
        source = config.inipath.name if config.inipath else "ini"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _NOT_A_STRING)
            ini = config.getini(opt.name)
    except (pytest.UsageError, TypeError, ValueError) as exc:
        raise pytest.UsageError(
            f"enginedead: {opt.name} (from {source}): {str(exc).splitlines()[0]}; "
            f'write it as a string, e.g. {opt.name} = "{opt.default or opt.metavar}"'
        ) from None
    if ini is None:
        return None
    where = f"{opt.name} = {ini!r}"
    if isinstance(ini, list):
        if opt.name != "enginedead_batch_sizes":
            raise pytest.UsageError(
                f"enginedead: {where} (from {source}): a list, where one value is expected; "
                f'write it as a string, e.g. {opt.name} = "{opt.default or opt.metavar}"'
            )
        return ",".join(str(item).strip() for item in ini), source, where
    return (ini if isinstance(ini, str) else str(ini)), source, where


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
    #: how the report path was given, for messages: ``--enginedead-report='x' (from command line)``
    report_where: str = ""
    #: how the run's guard switch was set, e.g. "ENGINEDEAD_GUARD='1' (from environment)"
    guard_where: str = ""
    #: run only this shard of the collected tests (``--enginedead-shard``), None: all
    shard: Shard | None = None
    #: durations to balance shards by / to write at the end, ``{vllm}`` replaced
    durations: str | None = None
    store_durations: str | None = None
    #: how each was given, for messages
    durations_where: str = ""
    store_durations_where: str = ""


def resolve_settings(config: pytest.Config) -> Settings:
    """Every option from its highest-precedence source, parsed once; UsageError on a bad one."""
    get = {o.name: resolve(config, o) for o in OPTIONS}
    check_vllm_environment()
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
        report_where=_given(get["enginedead_report"]),
        guard_where=_given(get["enginedead_guard"]),
        shard=get["enginedead_shard"].value,
        durations=_with_release(get["enginedead_durations"].value),
        store_durations=_with_release(get["enginedead_store_durations"].value),
        durations_where=_given(get["enginedead_durations"]),
        store_durations_where=_given(get["enginedead_store_durations"]),
    )


def _with_release(path: str | None) -> str | None:
    """A durations path with ``{vllm}`` replaced by the installed vLLM release."""
    return None if path is None else durations_path(path, compat.installed_version())


def _given(value: Value) -> str:
    """How a value was given, for messages: ``--enginedead-report='x' (from command line)``."""
    return f"{value.where} (from {value.source})"


def vllm_environment_problem() -> str | None:
    """A variable of vLLM's own that vLLM could not use (the deadline), in one line, or None."""
    try:
        compat.stock_deadline_s(version=compat.installed_version())
    except ValueError as exc:
        return str(exc)
    return None


def check_vllm_environment() -> None:
    """vLLM's deadline variable, checked once at the start, before any policy reads it."""
    problem = vllm_environment_problem()
    if problem:
        raise pytest.UsageError(f"enginedead: {problem}")


#: a one-line message longer than this has its long paths cut to their head and tail (``-v``: whole)
SHOWN_LINE_CHARS = 200
#: ... each path (or name) longer than this, in such a line
SHOWN_PATH_CHARS = 70
#: what a message holds a path as: a run of characters with no space or quote in it
_TOKEN = re.compile(r"[^\s'\"]+")
SHORTENED_NOTE = " [long paths shortened; -v shows them whole]"


def shorten_paths(message: str, limit: int = SHOWN_PATH_CHARS, line: int = SHOWN_LINE_CHARS) -> str:
    """``message``, if longer than ``line``, with every path longer than ``limit`` cut.

    The tail is kept longer than the head: it names the file the message is about
    (``.../models/m/config.json``).  A note at the end says how to see them whole.
    """
    if len(message) <= line:
        return message
    head = limit // 3

    def cut(match: re.Match[str]) -> str:
        text = match.group(0)
        return text if len(text) <= limit else f"{text[:head]}...{text[-(limit - head - 3):]}"

    shortened = _TOKEN.sub(cut, message)
    return shortened if shortened == message else shortened + SHORTENED_NOTE


@contextlib.contextmanager
def shown_whole_if_verbose(config: pytest.Config) -> Iterator[None]:
    """Usage errors raised inside keep their long paths under ``-v``, else are shortened."""
    try:
        yield
    except pytest.UsageError as exc:
        if (config.getoption("verbose", 0) or 0) > 0:
            raise
        raise pytest.UsageError(*(shorten_paths(str(a)) for a in exc.args)) from None


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``: how user code's exceptions are reported."""
    lines = str(exc).strip().splitlines()
    text = lines[0] + (" ..." if len(lines) > 1 else "") if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _hook_location(exc: BaseException) -> str:
    """Where the ``pytest_enginedead_policy`` implementation that raised lives (file:line)."""
    tb = exc.__traceback__
    where = "a conftest.py"
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "pytest_enginedead_policy":
            where = f"{code.co_filename}:{code.co_firstlineno}"
        tb = tb.tb_next
    return where


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
    except (pytest.UsageError, pytest.exit.Exception):
        raise  # the user's own refusal, or a deliberate pytest.exit()
    except (Exception, SystemExit) as exc:
        raise pytest.UsageError(
            f"enginedead: the pytest_enginedead_policy hook ({_hook_location(exc)}) raised {one_line(exc)}"
        ) from None
    if hooked is None:
        return TimeoutPolicy.reference(), "reference", "default"
    try:
        usable = callable(getattr(hooked, "timeout_s", None))
    except Exception as exc:
        raise pytest.UsageError(
            f"enginedead: pytest_enginedead_policy returned a {type(hooked).__name__}; "
            f"reading its timeout_s raised {one_line(exc)}"
        ) from None
    if not usable:
        raise pytest.UsageError(
            "enginedead: pytest_enginedead_policy returned "
            f"{type(hooked).__name__}, which has no callable timeout_s"
        )
    return hooked, policy_name(hooked, "hook"), "pytest_enginedead_policy hook"
