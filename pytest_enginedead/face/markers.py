"""The plugin's markers: their documentation and the parsing of their arguments.

A bad marker argument fails that test (and only that test) with a message naming
the marker and the argument.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from .. import compat
from ..contract.control import Injection
from ..contract.names import ENV_DIR, ENV_HARNESS_PID, GUARD_VARIABLES
from ..logic import invariants
from .options import BadValue, check_batch_sizes

DOCS = (
    "enginedead_batch_sizes(*sizes): run this test's engine fixtures at these batch "
    "sizes instead of --enginedead-batch-sizes.",
    "enginedead_invariants(*names, cap_s=None, headroom=None, step_times=None): check "
    "these invariants of the active timeout policy (cpu_gt_gpu, grows_with_batch, "
    "capped, headroom, not_below_stock); a violation fails the test with the numbers. "
    "headroom uses the engine's measured step times, or step_times={batch: seconds}.",
    "enginedead_timeout(seconds): pin this test's engine to a fixed execute-model "
    "deadline instead of the policy (to reproduce vLLM's stock behaviour).",
    "enginedead_guard(hang_s=None, policy=None): run this test's engine with the guard on: "
    "vLLM's deadline becomes the point of suspicion; a busy worker gets up to the policy's "
    "cap, a worker idle for hang_s (default 60) ends the wait.",
    "enginedead_inject(slow_s_per_seq=0.0, hang_at_step=None, crash_at_step=None): fault "
    "injection inside the engine's worker: each step first burns CPU for "
    "slow_s_per_seq x its batch size; at step N (from 1) it blocks idle forever, or "
    "exits the worker process.",
)


class BadMarker(ValueError):
    """A marker (or fixture call) with arguments it does not take; the message says which."""


def _only(marker: pytest.Mark, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(marker.kwargs) - set(allowed))
    if unknown:
        raise BadMarker(
            f"@pytest.mark.{marker.name} got unknown argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(allowed) or 'no keyword arguments'}"
        )


def _number(what: str, name: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadMarker(f"{what}: {name}={value!r} is not a number")
    if value < minimum:
        raise BadMarker(f"{what}: {name}={value!r} must be >= {minimum:g}")
    return float(value)


def _step(what: str, name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadMarker(f"{what}: {name}={value!r} must be a step number >= 1")
    return value


def _seconds(what: str, name: str, value: Any) -> float:
    """A deadline as vLLM can have it: whole seconds, at least 1 (it is parsed with int())."""
    seconds = _number(what, name, value)
    if seconds < 1 or seconds != int(seconds):
        raise BadMarker(
            f"{what}: {name}={value!r} is not a whole number of seconds >= 1; vLLM's deadline "
            "(VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS) is parsed with int()"
        )
    if seconds > compat.MAX_DEADLINE_S:
        raise BadMarker(
            f"{what}: {name}={value!r} must be at most {compat.MAX_DEADLINE_S} s, the longest wait "
            "vLLM can make (Python's threading.TIMEOUT_MAX)"
        )
    return seconds


INJECT_ARGS = ("slow_s_per_seq", "hang_at_step", "crash_at_step")


def injection(what: str, kwargs: Mapping[str, Any]) -> Injection:
    """Fault arguments (marker keywords or a factory's ``inject=`` dict), checked."""
    unknown = sorted(set(kwargs) - set(INJECT_ARGS))
    if unknown:
        raise BadMarker(
            f"{what} got unknown argument(s) {', '.join(map(str, unknown))}; "
            f"it takes {', '.join(INJECT_ARGS)}"
        )
    return Injection(
        slow_s_per_seq=_number(what, "slow_s_per_seq", kwargs.get("slow_s_per_seq", 0.0)),
        hang_at_step=_step(what, "hang_at_step", kwargs.get("hang_at_step")),
        crash_at_step=_step(what, "crash_at_step", kwargs.get("crash_at_step")),
    )


def batch_sizes(marker: pytest.Mark) -> tuple[int, ...]:
    _only(marker, ())
    try:
        return check_batch_sizes(tuple(marker.args))
    except BadValue as exc:
        raise BadMarker(f"@pytest.mark.enginedead_batch_sizes{marker.args!r}: {exc}") from None


def timeout(marker: pytest.Mark) -> float:
    _only(marker, ("seconds",))
    args = list(marker.args)
    if "seconds" in marker.kwargs:
        args.append(marker.kwargs["seconds"])
    if len(args) != 1:
        raise BadMarker("@pytest.mark.enginedead_timeout takes one argument: seconds")
    return _seconds("@pytest.mark.enginedead_timeout", "seconds", args[0])


def inject(marker: pytest.Mark) -> Injection:
    if marker.args:
        raise BadMarker(
            "@pytest.mark.enginedead_inject takes keyword arguments only: " + ", ".join(INJECT_ARGS)
        )
    return injection("@pytest.mark.enginedead_inject", marker.kwargs)


def guard(marker: pytest.Mark) -> tuple[float | None, str | None]:
    """``enginedead_guard``'s (hang_s, policy spec), each None when not given."""
    what = "@pytest.mark.enginedead_guard"
    _only(marker, ("hang_s", "policy"))
    if marker.args:
        raise BadMarker(f"{what} takes keyword arguments only: hang_s, policy")
    hang = marker.kwargs.get("hang_s")
    policy = marker.kwargs.get("policy")
    if hang is not None:
        hang = _number(what, "hang_s", hang)
        if hang <= 0:
            raise BadMarker(f"{what}: hang_s={marker.kwargs['hang_s']!r} must be above 0")
    if policy is not None and (not isinstance(policy, str) or not policy.strip()):
        raise BadMarker(f"{what}: policy={policy!r} must be reference, vllm-stock or module:attr")
    return hang, policy.strip() if isinstance(policy, str) else None


def factory_arguments(
    batch_size: Any,
    timeout_s: Any,
    inject: Injection | Mapping[str, Any] | None,
    what: str = "vllm_engine_factory",
) -> tuple[int, float | None, Injection]:
    """A factory's arguments, checked: (batch size, deadline or None, faults)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BadMarker(f"{what}: batch_size={batch_size!r} is not a positive integer")
    seconds = None if timeout_s is None else _seconds(what, "timeout_s", timeout_s)
    if isinstance(inject, Injection):
        faults = inject
    elif inject is None:
        faults = Injection()
    elif isinstance(inject, Mapping):
        faults = injection(f"{what}(inject=...)", inject)
    else:
        raise BadMarker(f"{what}: inject={inject!r} must be a dict of {', '.join(INJECT_ARGS)}")
    return batch_size, seconds, faults


# --- the handles' and factories' own arguments -------------------------------------------


def _count(what: str, name: str, value: Any, meaning: str) -> int:
    """A whole number >= 1, not a bool: how many sequences, tokens, requests."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadMarker(f"{what}: {name}={value!r} is not a whole number >= 1 ({meaning})")
    return value


def _fits(what: str, prompt_len: int, max_tokens: int, max_model_len: int | None, bos: bool) -> None:
    """The prompt and the tokens asked for fit in the engine's context, or vLLM refuses them."""
    need = prompt_len + max_tokens + int(bos)
    if max_model_len is not None and need > max_model_len:
        raise BadMarker(
            f"{what}: prompt_len={prompt_len} + max_tokens={max_tokens}"
            + (" + 1 (the tokenizer's BOS token)" if bos else "")
            + f" is {need} tokens, more than the engine's max_model_len {max_model_len}; ask for fewer, "
            "or start an engine with a longer one (vllm_engine_factory / vllm_server_factory(..., "
            "max_model_len=N))"
        )


def _batch(what: str, n: Any, max_tokens: Any, prompt_len: Any, each: str, prompt: str) -> None:
    """What ``generate`` and ``complete`` share: how many, how many tokens each, how long a prompt."""
    if n is not None:
        _count(what, "n", n, f"{each}s at once; None: the handle's batch size")
    _count(what, "max_tokens", max_tokens, f"tokens to generate per {each}")
    _count(what, "prompt_len", prompt_len, f"prompt {prompt} per {each}")


def generate_arguments(
    n: Any, max_tokens: Any, prompt_len: Any, arriving: Any, max_model_len: int | None,
    what: str = "EngineHandle.generate",
) -> None:
    """``EngineHandle.generate``'s arguments, checked before the engine sees any of them."""
    _batch(what, n, max_tokens, prompt_len, "sequence", "tokens")
    if isinstance(arriving, (list, tuple)):
        if not arriving:
            raise BadMarker(f"{what}: arriving={arriving!r} is empty (requests that join before each "
                            "engine step, one count per step; None: all at once)")
        for k in arriving:
            _count(what, "arriving", k, f"in {arriving!r}: requests that join before each engine step")
    elif arriving is not None:
        _count(what, "arriving", arriving, "requests that join before each engine step, or a list of "
               "counts, one per step; None: all at once")
    _fits(what, prompt_len, max_tokens, max_model_len, bos=False)


def complete_arguments(
    n: Any, max_tokens: Any, prompt_len: Any, stream: Any, max_model_len: int | None, bos: bool,
    what: str = "ServerHandle.complete",
) -> None:
    """``ServerHandle.complete``'s arguments, checked before any request is sent."""
    _batch(what, n, max_tokens, prompt_len, "request", "words")
    if not isinstance(stream, bool):
        raise BadMarker(f"{what}: stream={stream!r} is not True or False")
    _fits(what, prompt_len, max_tokens, max_model_len, bos)


#: the factories' own keyword arguments (beside the engine's or server's)
FACTORY_ARGS = ("batch_size", "timeout_s", "inject", "model")
_BATCH = "give the batch size as the factory's batch_size (its first argument)"
#: engine arguments (``vllm.LLM``) the harness sets itself: what to use instead
OWNED_ENGINE_ARGS = {"max_num_seqs": _BATCH}
#: API server arguments the harness sets itself, or that would take the server out of its reach
OWNED_SERVER_ARGS = {
    "max_num_seqs": _BATCH,
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
    compat.DEADLINE_ENV: "give the deadline as timeout_s= (the harness sets it per test)",
    ENV_DIR: "the harness makes each engine's run directory",
    ENV_HARNESS_PID: "the harness sets it for every engine",
    **{name: "the harness sets the guard for every engine it starts: turn it on with --enginedead-guard"
       for name in GUARD_VARIABLES},
}


def _suggest(name: str, choices: frozenset[str] | set[str]) -> str:
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
        flags = compat.server_option_strings()
        if flags is None:
            return  # this vLLM cannot say: its own start will
        turned = {key: compat.server_flag(key, value) for key, value in args.items()}
        bad = [key for key, flag in turned.items() if flag is not None and flag not in flags]
        if bad:
            raise BadMarker(
                f"{what}: " + ", ".join(f"{k}={args[k]!r} becomes {turned[k]}" for k in bad)
                + f", which the API server of vLLM {compat.installed_version()} does not take"
                + "".join(_suggest(str(turned[k]), flags) for k in bad) + f" {own}"
            )
        return
    names = compat.engine_argument_names()
    if names is None:
        return
    bad = [key for key in args if key not in names]
    if bad:
        raise BadMarker(
            f"{what}: {', '.join(f'{k}={args[k]!r}' for k in bad)} "
            f"{'is not an engine argument' if len(bad) == 1 else 'are not engine arguments'} of vLLM "
            f"{compat.installed_version()} (vllm.LLM / EngineArgs)"
            + "".join(_suggest(k, names | set(FACTORY_ARGS)) for k in bad) + f" {own}"
        )


@dataclass(frozen=True)
class InvariantRequest:
    names: tuple[str, ...]
    cap_s: float | None
    headroom: float | None
    step_times: Mapping[int, float] | None


def invariant_request(marker: pytest.Mark) -> InvariantRequest:
    what = "@pytest.mark.enginedead_invariants"
    _only(marker, ("cap_s", "headroom", "step_times"))
    names = tuple(marker.args)
    if not names:
        raise BadMarker(
            f"{what} needs at least one invariant name; valid: {', '.join(invariants.NAMES)}"
        )
    bad = [n for n in names if not isinstance(n, str) or n not in invariants.NAMES]
    if bad:
        raise BadMarker(
            f"{what}: unknown invariant {', '.join(map(repr, bad))}; "
            f"valid: {', '.join(invariants.NAMES)}"
        )
    kw = marker.kwargs
    cap, room, steps = kw.get("cap_s"), kw.get("headroom"), kw.get("step_times")
    if steps is not None:
        if not isinstance(steps, Mapping) or not steps:
            raise BadMarker(f"{what}: step_times must be a non-empty {{batch_size: seconds}} mapping")
        for n, s in steps.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise BadMarker(f"{what}: step_times key {n!r} is not a batch size")
            _number(what, f"step_times[{n}]", s)
    return InvariantRequest(
        names,
        None if cap is None else _number(what, "cap_s", cap),
        None if room is None else _headroom(what, room),
        None if steps is None else {int(n): float(s) for n, s in steps.items()},
    )


def _headroom(what: str, value: Any) -> float:
    room = _number(what, "headroom", value)
    if room <= 0:
        raise BadMarker(
            f"{what}: headroom={value!r} must be above 0 "
            "(a multiple of the step time, e.g. 3); 0 would pass any policy"
        )
    return room
