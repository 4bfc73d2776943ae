"""What is checked before any engine starts that needs the installed vLLM to answer.

vLLM's registry of architectures (read from its source, imported only when needed) and
vLLM's own variables; the answers are one line each, for every door to put its name in
front of.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..compat import in_server, llm_api, registry, versions
from ..contract.names import ENV_DIR, ENV_HARNESS_PID, GUARD_VARIABLES
from ..logic.arguments import FACTORY_ARGS, BadMarker
from ..logic.modelconfig import config_architectures, config_problem, read_config, validate_model
from ..logic.values import BadValue


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
    return _architecture_problem(config_architectures(data, config), config)


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
        versions.stock_deadline_s(version=versions.installed_version())
    except ValueError as exc:
        return str(exc)
    return None


HARNESS_BATCH = "give the batch size as the factory's batch_size (its first argument)"

#: engine arguments (``vllm.LLM``) the harness sets itself: what to use instead
OWNED_ENGINE_ARGS = {"max_num_seqs": HARNESS_BATCH}

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
}

#: environment variables the harness sets for every engine it starts: never a factory argument
OWNED_VARIABLES = {
    versions.DEADLINE_ENV: "give the deadline as timeout_s= (the harness sets it per test)",
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
    if not args:
        return
    owned = OWNED_SERVER_ARGS if server else OWNED_ENGINE_ARGS
    variables = {name.upper(): why for name, why in OWNED_VARIABLES.items()}
    for key, value in args.items():
        why = owned.get(key) or variables.get(key.upper())
        if why:
            raise BadMarker(f"{what}: {key}={value!r} is the harness's to set: {why}")
    own = f"(the factory's own: {', '.join(FACTORY_ARGS)})"
    if server:
        flags = in_server.server_option_strings()
        if flags is None:
            return  # this vLLM cannot say: its own start will
        turned = {key: in_server.server_flag(key, value) for key, value in args.items()}
        bad = [key for key, flag in turned.items() if flag is not None and flag not in flags]
        if bad:
            raise BadMarker(
                f"{what}: " + ", ".join(f"{k}={args[k]!r} becomes {turned[k]}" for k in bad)
                + f", which the API server of vLLM {versions.installed_version()} does not take"
                + "".join(suggest(str(turned[k]), flags) for k in bad) + f" {own}"
            )
        return
    names = llm_api.engine_argument_names()
    if names is None:
        return
    bad = [key for key in args if key not in names]
    if bad:
        raise BadMarker(
            f"{what}: {', '.join(f'{k}={args[k]!r}' for k in bad)} "
            f"{'is not an engine argument' if len(bad) == 1 else 'are not engine arguments'} of vLLM "
            f"{versions.installed_version()} (vllm.LLM / EngineArgs)"
            + "".join(suggest(k, names | set(FACTORY_ARGS)) for k in bad) + f" {own}"
        )
