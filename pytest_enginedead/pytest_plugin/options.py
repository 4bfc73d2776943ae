"""The plugin's options: one definition each, and the run's settings resolved from them.

Precedence: marker > command line > environment > ini > default.  A bad value is a
``pytest.UsageError`` that names the value and where it came from.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ..compat import versions
from ..contract.names import CHECK_PLAN_ENV
from ..logic import releases
from ..logic.inputs.modelconfig import BUNDLED_MODEL, model_label
from ..logic.inputs.optiontable import OPTIONS, Option
from ..logic.inputs.sampling import LivenessSettings
from ..logic.inputs.values import BadValue, Shard, one_line, shorten_paths
from ..logic.planning.nodes import default_ranks
from ..logic.timeouts.policies import PolicyError, PolicyLike, TimeoutPolicy, load_policy, policy_name

# What only an engine run reads (the model's checks, vLLM's plugin list, the check's plan, shard
# durations) is imported where it is read: every pytest run of the environment resolves these
# options, most of them with no engine test (``plugin.py``).


def check_model(model: str, source: str, max_model_len: int | None = None, server: bool = False) -> None:
    """A model no engine can run is a usage error, said once, before any engine starts.

    ``source`` is where the run's model came from (``Settings.model_source``); ``max_model_len``
    the context the fixtures' engines start with (None: no fixture engine is planned); ``server``:
    an API server is planned, which loads the model's tokenizer.
    """
    from ..harness.engines.startchecks import model_problem

    problem = model_problem(model, max_model_len=max_model_len, server=server)
    if problem:
        raise pytest.UsageError(f"enginedead: {model_label(model, source)} (from {source}): {problem}")


def check_plugins() -> None:
    """``VLLM_PLUGINS`` that leaves our plugin out: nothing of the harness would run inside vLLM
    (``enginedead doctor``'s wording, with its fix), refused before the first engine starts."""
    from ..logic.reporting.diagnosis import plugin_problem

    problem = plugin_problem(os.environ) if versions.vllm_missing_reason() is None else None
    if problem:
        raise pytest.UsageError(f"enginedead: {problem}")


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
    #: how the run's batch sizes were set, e.g. "--enginedead-batch-sizes='8' (from command line)"
    batch_sizes_where: str = ""
    #: run only this shard of the collected tests (``--enginedead-shard``), None: all
    shard: Shard | None = None
    #: ranks of the fixtures' engines (``--enginedead-tensor-parallel-size``), and how it was given
    tensor_parallel: int = 1
    tensor_parallel_where: str = ""
    #: nodes the fixtures' engines spread their ranks over (``--enginedead-nodes``), and how given
    nodes: int = 1
    nodes_where: str = ""
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
    check_internal_variables()
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
        vllm_version=versions.installed_version(),
        report_where=_given(get["enginedead_report"]),
        guard_where=_given(get["enginedead_guard"]),
        batch_sizes_where=_batch_sizes_where(get["enginedead_batch_sizes"]),
        shard=get["enginedead_shard"].value,
        # on several nodes one rank per node, unless the tensor-parallel size says more
        tensor_parallel=default_ranks(get["enginedead_nodes"].value, _unless_default(
            get["enginedead_tensor_parallel_size"])),
        tensor_parallel_where=_given(get["enginedead_tensor_parallel_size"]),
        nodes=get["enginedead_nodes"].value,
        nodes_where=_given(get["enginedead_nodes"]),
        durations=_with_release(get["enginedead_durations"].value),
        store_durations=_with_release(get["enginedead_store_durations"].value),
        durations_where=_given(get["enginedead_durations"]),
        store_durations_where=_given(get["enginedead_store_durations"]),
    )


def _unless_default(value: Value) -> Any:
    """The option's value where it was given, None where it is the default."""
    return None if value.source == "default" else value.value


def _with_release(path: str | None) -> str | None:
    """A durations path with ``{vllm}`` replaced by the installed vLLM release."""
    if path is None:
        return None
    from ..logic.planning.sharding import durations_path

    return durations_path(path, versions.installed_version())


def _batch_sizes_where(value: Value) -> str:
    """How the run's batch sizes were set, for a refusal: the default is named as such."""
    if value.source == "default":
        return f"the default batch sizes {value.where} (set --enginedead-batch-sizes)"
    return _given(value)


def _given(value: Value) -> str:
    """How a value was given, for messages: ``--enginedead-report='x' (from command line)``."""
    return f"{value.where} (from {value.source})"


def check_vllm_environment() -> None:
    """vLLM's deadline variable, checked once at the start, before any policy reads it."""
    if releases.DEADLINE_ENV not in os.environ:  # vLLM's default: nothing to check
        return
    from ..harness.engines.startchecks import vllm_environment_problem

    problem = vllm_environment_problem()
    if problem:
        raise pytest.UsageError(f"enginedead: {problem}")


def check_internal_variables() -> None:
    """The variables ``enginedead check`` hands its regression run, read like public ones: a bad
    one is one line naming it, at the start (the suite would read it while collecting)."""
    raw = os.environ.get(CHECK_PLAN_ENV)
    if raw is not None:
        from ..logic.reporting.checking import BadPlan, CheckPlan

        try:
            CheckPlan.parse(raw)
        except BadPlan as exc:
            raise pytest.UsageError(f"enginedead: {CHECK_PLAN_ENV}={raw!r} (from environment) {exc}") \
                from None


@contextlib.contextmanager
def shown_whole_if_verbose(config: pytest.Config) -> Iterator[None]:
    """Usage errors raised inside keep their long paths under ``-v``, else are shortened."""
    try:
        yield
    except pytest.UsageError as exc:
        if (config.getoption("verbose", 0) or 0) > 0:
            raise
        raise pytest.UsageError(*(shorten_paths(str(a)) for a in exc.args)) from None


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


#: the ``pytest_enginedead_policy`` implementations there were when the policy hook was asked
#: (by plugin name); absent when the option chose the policy and no hook was asked
policy_hooks_key = pytest.StashKey[frozenset[str]]()


def check_late_policy_hooks(config: pytest.Config, settings: Settings) -> None:
    """A ``pytest_enginedead_policy`` hook that appeared after the policy was chosen (in a
    conftest.py pytest loads while collecting, below the rootdir) would be ignored: refused."""
    asked = config.stash.get(policy_hooks_key, None)
    if asked is None:
        return
    late = [impl for impl in config.pluginmanager.hook.pytest_enginedead_policy.get_hookimpls()
            if impl.plugin_name not in asked]
    if late:
        path = getattr(late[0].plugin, "__file__", None) or late[0].plugin_name
        with contextlib.suppress(ValueError):
            path = os.path.relpath(path, config.rootpath) if os.path.isabs(path) else path
        raise pytest.UsageError(
            f"enginedead: the pytest_enginedead_policy hook in {path} came too late: pytest loaded it while "
            f"collecting, after the run's policy was chosen (policy {settings.policy_name}, "
            f"{settings.policy_source}); a policy hook must live in the rootdir's conftest.py "
            f"({os.path.join(config.rootpath, 'conftest.py')}) or a plugin (-p)"
        )


def _resolve_policy(config: pytest.Config, chosen: Value) -> tuple[PolicyLike, str, str]:
    """(policy, its name, where it came from): the option, else the conftest hook, else reference."""
    if chosen.value is not None:
        try:
            search = [str(config.rootpath), os.getcwd()]
            policy = load_policy(chosen.value, search, versions.installed_version())
        except PolicyError as exc:
            raise pytest.UsageError(f"enginedead: {chosen.where} (from {chosen.source}): {exc}") from None
        return policy, policy_name(policy, chosen.value), chosen.source
    asked = config.pluginmanager.hook.pytest_enginedead_policy.get_hookimpls()
    config.stash[policy_hooks_key] = frozenset(impl.plugin_name for impl in asked)
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
