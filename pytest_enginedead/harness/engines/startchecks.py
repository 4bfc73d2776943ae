"""What is checked before any engine starts that needs the installed vLLM (or the machine) to answer.

vLLM's registries of architectures and model types (read from their sources, imported only
when needed), the tokenizer a server loads, the batch sizes vLLM builds and this machine
holds, vLLM's own variables; the answers are one line each, for every input that carries
the value (an option, a factory argument, a command's flag) to put its name in front of.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...compat import in_server, llm_api, llm_config, registry, versions
from ...contract.names import ENV_DIR, ENV_HARNESS_PID, GUARD_VARIABLES
from ...logic import releases
from ...logic.inputs.arguments import FACTORY_ARGS, BadMarker
from ...logic.inputs.modelconfig import (
    config_architectures,
    config_problem,
    length_problem,
    read_config,
    validate_model,
)
from ...logic.inputs.values import BadValue, one_line
from ...logic.machine import meminfo
from ...logic.sizing import batchbound
from .server import has_tokenizer


def model_problem(
    model: str, architecture: bool = True, max_model_len: int | None = None, server: bool = False,
    length_given: str = "",
) -> str | None:
    """Why no engine can run on this model directory, in one line, or None.

    The one model check, called wherever a model is given (the options, the factories, the
    ``enginedead`` command, the xdist controller), each of which puts its own name for
    the value in front: the directory and its ``config.json`` (``validate_model``), the
    sizes (``config_problem``), the context the engines start with (``max_model_len``,
    ``length_given`` saying how it was set; None: not checked) against the model's, the
    tokenizer an API server loads (``server``), and, with ``architecture``, whether the
    installed vLLM knows the architecture and the ``model_type`` it names (their registries'
    sources are read; the registries are imported only for a name the sources do not list;
    without vLLM that part is skipped).
    """
    try:
        config = Path(validate_model(model)) / "config.json"
        data = read_config(config)
    except BadValue as exc:
        return str(exc)
    problem = config_problem(data, config)
    if not problem and os.environ.get(LONG_MAX_MODEL_LEN_ENV, "").strip() in ("", "0"):
        given = length_given or f"the harness's max_model_len {max_model_len}"
        problem = length_problem(data, config, max_model_len, given)
    if not problem and server:
        problem = tokenizer_problem(config.parent)
    if problem or not architecture:
        return problem
    return (_architecture_problem(config_architectures(data, config), config)
            or _model_type_problem(data, config))


#: vLLM's variable that lets max_model_len pass the model's own context
LONG_MAX_MODEL_LEN_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def tokenizer_problem(model_dir: Path) -> str | None:
    """Why vLLM's API server could not load the tokenizer beside the model, in one line, or None.

    The server loads it at start when the directory has one (``server.has_tokenizer``; else the
    harness starts it with ``--skip-tokenizer-init``): ``tokenizer.json`` and
    ``tokenizer_config.json`` must be JSON objects, and ``tokenizer.json`` must load with the
    ``tokenizers`` library where it is installed (cheap: no torch).
    """
    if not has_tokenizer(str(model_dir)):
        return None
    loads = "vLLM's API server loads it at start"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        path = model_dir / name
        if path.is_file():
            try:
                read_config(path)
            except BadValue as exc:
                return f"{exc}; {loads}"
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        import tokenizers
    except ImportError:
        return None
    try:
        tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:
        return f"{path}: the tokenizers library cannot load it ({one_line(exc)}); {loads}"
    return None


def _model_type_problem(data: dict[str, Any], config: Path) -> str | None:
    """Why vLLM cannot read a config of this ``model_type``, in one line, or None (a config with
    ``auto_map`` brings its own code: not judged here)."""
    model_type = data.get("model_type")
    if model_type is None or "auto_map" in data or versions.vllm_missing_reason() is not None:
        return None
    if not isinstance(model_type, str) or not model_type.strip():
        return f'{config}: "model_type": {model_type!r} is not the name of a model type'
    try:
        if registry.knows_model_type(model_type):
            return None
    except Exception:
        return None  # no registry to ask: the engine start will tell
    return (
        f'{config}: "model_type": {model_type!r} is known to neither vLLM {versions.installed_version()} '
        f"nor transformers {_transformers_version()} (their config registries); use the model type its "
        'architecture reads, e.g. "llama" for LlamaForCausalLM'
    )


def _transformers_version() -> str:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def batch_problem(
    model: str, batch_size: int, server: bool, engine_args: Mapping[str, Any] | None = None,
    said: str | None = None,
) -> str | None:
    """Why an engine of the harness cannot run at ``batch_size`` (``said``: how its input names it),
    in one line, or None: over what vLLM builds (``max_num_batched_tokens``) or what this machine
    holds (``logic.planning.batchbound``).  A model that cannot run at all (a bad config, or too large for
    one sequence here) is the model check's to say, not a batch size's: None."""
    args = dict(engine_args or {})
    try:
        length = int(args.get("max_model_len", llm_config.DEFAULT_MAX_MODEL_LEN))
    except (TypeError, ValueError):
        length = llm_config.DEFAULT_MAX_MODEL_LEN  # vLLM itself will say what is wrong with it
    problem = batchbound.tokens_bound(server, args, length).problem(batch_size, said)
    if problem or llm_config.KV_CACHE_ENV in os.environ or llm_config.KV_CACHE_ARG in args:
        return problem  # a KV cache the user sized is theirs to fit
    try:
        config = Path(model) / "config.json"
        data = read_config(config)
        available = meminfo("MemAvailable")
    except (BadValue, OSError, ValueError):
        return None
    if config_problem(data, config):
        return None
    bound = batchbound.memory_bound(data, length, available)
    return bound.problem(batch_size, said) if bound is not None and bound.largest > 0 else None


def _architecture_problem(archs: list[str], config: Path) -> str | None:
    """Why the installed vLLM cannot build these architectures, in one line, or None."""
    if versions.vllm_missing_reason() is not None:
        return None  # no vLLM here to ask: no engine will start either
    try:
        unknown = [a for a in archs if not registry.knows_architecture(a)]
    except Exception:
        return None  # no vLLM to ask (or it cannot say): the engine start will tell
    if unknown or not archs:
        return (
            f"{config} names architecture {', '.join(unknown) or '(none)'}, which vLLM "
            f"{versions.installed_version()} does not know; use one it supports, e.g. LlamaForCausalLM"
        )
    return None


def vllm_environment_problem() -> str | None:
    """A variable of vLLM's own that vLLM could not use (the deadline), in one line, or None."""
    try:
        releases.stock_deadline_s(version=versions.installed_version())
    except ValueError as exc:
        return str(exc)
    return None


HARNESS_BATCH = "give the batch size as the factory's batch_size (its first argument)"

#: engine arguments (``vllm.LLM``) the harness sets itself: what to use instead
#: vLLM's multi-node arguments: the harness gives each node its own from ``nodes=``
OWNED_NODE_ARGS = {
    name: "the harness sets vLLM's multi-node arguments for each node it starts: give nodes=N"
    for name in ("nnodes", "node_rank", "master_addr", "master_port")
}

OWNED_ENGINE_ARGS = {"max_num_seqs": HARNESS_BATCH, **OWNED_NODE_ARGS}

#: API server arguments the harness sets itself, or that would take the server out of its reach
OWNED_SERVER_ARGS = {
    "max_num_seqs": HARNESS_BATCH,
    "host": "the harness serves on 127.0.0.1; read the address from handle.base_url",
    "port": "the harness picks a free port and watches /health on it; read it from handle.base_url",
    "uds": "the harness talks to the server over TCP on 127.0.0.1; read handle.base_url",
    "headless": "the harness needs the API server itself, not only its engine",
    "grpc": "the harness's clients speak HTTP (the OpenAI API)",
    "ssl_keyfile": "the harness's clients and its /health watch speak plain HTTP",
    "ssl_certfile": "the harness's clients and its /health watch speak plain HTTP",
    "served_model_name": "the harness names the model after its directory; read handle.model",
    "skip_tokenizer_init": "the harness sets it when the model directory has no tokenizer, "
                           "and its prompts follow",
    "api_key": "the harness's clients send their own key",
    **OWNED_NODE_ARGS,
}

#: environment variables the harness sets for every engine it starts: never a factory argument
OWNED_VARIABLES = {
    releases.DEADLINE_ENV: "give the deadline as timeout_s= (the harness sets it per test)",
    ENV_DIR: "the harness makes each engine's run directory",
    ENV_HARNESS_PID: "the harness sets it for every engine",
    **{name: "the harness sets the guard for every engine it starts: turn it on with --enginedead-guard"
       for name in GUARD_VARIABLES},
}


def suggest(name: str, choices: frozenset[str] | set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(choices), n=3, cutoff=0.75)
    return f"; did you mean {', '.join(close)}?" if close else ""


def factory_engine_args(what: str, args: Mapping[str, Any], server: bool) -> None:
    """A factory's engine (or server) arguments: none the harness owns, each one vLLM takes.

    The names are checked against the installed vLLM's own list (``EngineArgs`` and
    ``vllm.LLM``'s parameters, or the API server's parser) before anything starts;
    where this vLLM cannot say, vLLM's own start will.
    """
    args = {k: v for k, v in args.items() if k not in FACTORY_ARGS}  # the factory's own (nodes=)
    if not args:
        return
    _refuse_owned_args(what, args, server)
    if server:
        _check_server_args(what, args)
    else:
        _check_engine_args(what, args)


def _refuse_owned_args(what: str, args: Mapping[str, Any], server: bool) -> None:
    """No argument the harness sets itself (for a server or an engine), nor one named as an
    environment variable the harness sets."""
    owned = OWNED_SERVER_ARGS if server else OWNED_ENGINE_ARGS
    variables = {name.upper(): why for name, why in OWNED_VARIABLES.items()}
    for key, value in args.items():
        why = owned.get(key) or variables.get(key.upper())
        if why:
            raise BadMarker(f"{what}: {key}={value!r} is the harness's to set: {why}")


def _factory_own() -> str:
    return f"(the factory's own: {', '.join(FACTORY_ARGS)})"


def _check_server_args(what: str, args: Mapping[str, Any]) -> None:
    """Each argument becomes a flag the installed API server takes, and its parser accepts the
    value (unchecked where this vLLM cannot list its flags)."""
    flags = in_server.server_option_strings()
    if flags is None:
        return  # this vLLM cannot say: its own start will
    turned = {key: in_server.server_flag(key, value) for key, value in args.items()}
    bad = [key for key, flag in turned.items() if flag is not None and flag not in flags]
    if bad:
        raise BadMarker(
            f"{what}: " + ", ".join(f"{k}={args[k]!r} becomes {turned[k]}" for k in bad)
            + f", which the API server of vLLM {versions.installed_version()} does not take"
            + "".join(suggest(str(turned[k]), flags) for k in bad) + f" {_factory_own()}"
        )
    for key, value in args.items():  # each as the server's own parser reads it, before it starts
        words = in_server.server_tokens(key, value)
        problem = in_server.server_args_problem(words)
        if problem:
            raise BadMarker(f"{what}: {key}={value!r} becomes {' '.join(words)}, which vLLM's server "
                            f"refuses: {problem}")


def _check_engine_args(what: str, args: Mapping[str, Any]) -> None:
    """Each argument is one the installed ``vllm.LLM`` / ``EngineArgs`` takes (unchecked where
    this vLLM cannot list them)."""
    names = llm_api.engine_argument_names()
    if names is None:
        return
    bad = [key for key in args if key not in names]
    if bad:
        raise BadMarker(
            f"{what}: {', '.join(f'{k}={args[k]!r}' for k in bad)} "
            f"{'is not an engine argument' if len(bad) == 1 else 'are not engine arguments'} of vLLM "
            f"{versions.installed_version()} (vllm.LLM / EngineArgs)"
            + "".join(suggest(k, names | set(FACTORY_ARGS)) for k in bad) + f" {_factory_own()}"
        )
