"""The arguments of markers, factories and handles, checked before any engine sees them.

A bad one is a ``BadMarker`` whose message names the marker or call and the argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...contract.control import Injection
from .. import releases


class BadMarker(ValueError):
    """A marker (or fixture call) with arguments it does not take; the message says which."""


def number(what: str, name: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadMarker(f"{what}: {name}={value!r} is not a number")
    if value < minimum:
        raise BadMarker(f"{what}: {name}={value!r} must be >= {minimum:g}")
    return float(value)


def step_number(what: str, name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadMarker(f"{what}: {name}={value!r} must be a step number >= 1")
    return value


def whole_seconds(what: str, name: str, value: Any) -> float:
    """A deadline as vLLM can have it: whole seconds, at least 1 (it is parsed with int())."""
    seconds = number(what, name, value)
    if seconds < 1 or seconds != int(seconds):
        raise BadMarker(
            f"{what}: {name}={value!r} is not a whole number of seconds >= 1; vLLM's deadline "
            "(VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS) is parsed with int()"
        )
    if seconds > releases.MAX_DEADLINE_S:
        raise BadMarker(
            f"{what}: {name}={value!r} must be at most {releases.MAX_DEADLINE_S} s, the longest wait "
            "vLLM can make (Python's threading.TIMEOUT_MAX)"
        )
    return seconds


INJECT_ARGS = ("slow_s_per_seq", "hang_at_step", "crash_at_step", "spin_at_step", "ranks", "nodes")


def injection(what: str, kwargs: Mapping[str, Any]) -> Injection:
    """Fault arguments (marker keywords or a factory's ``inject=`` dict), checked."""
    unknown = sorted(set(kwargs) - set(INJECT_ARGS))
    if unknown:
        raise BadMarker(
            f"{what} got unknown argument(s) {', '.join(map(str, unknown))}; "
            f"it takes {', '.join(INJECT_ARGS)}"
        )
    return Injection(
        slow_s_per_seq=number(what, "slow_s_per_seq", kwargs.get("slow_s_per_seq", 0.0)),
        hang_at_step=step_number(what, "hang_at_step", kwargs.get("hang_at_step")),
        crash_at_step=step_number(what, "crash_at_step", kwargs.get("crash_at_step")),
        spin_at_step=step_number(what, "spin_at_step", kwargs.get("spin_at_step")),
        ranks=rank_list(what, kwargs.get("ranks")),
        nodes=rank_list(what, kwargs.get("nodes"), "nodes", "nodes (vLLM's --node-rank)", "nodes=[1]"),
    )


def rank_count(what: str, name: str, value: Any, meaning: str = "ranks: one worker process each") -> int:
    """``tensor_parallel_size=`` / ``pipeline_parallel_size=`` / ``nodes=``: a whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadMarker(f"{what}: {name}={value!r} is not a whole number >= 1 ({meaning})")
    return value


def rank_list(what: str, value: Any, name: str = "ranks", meaning: str = "worker ranks",
              example: str = "ranks=[1]") -> tuple[int, ...] | None:
    """``ranks=`` (or ``nodes=``): the worker ranks (nodes) a fault applies to, a list of whole
    numbers >= 0; None: all."""
    if value is None:
        return None
    items = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(items, (list, tuple)) or not items or any(
            isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in items):
        every = name.removesuffix("s")
        raise BadMarker(f"{what}: {name}={value!r} must be a list of {meaning} (whole numbers >= 0), "
                        f"e.g. {example}; None: every {every}")
    return tuple(sorted(set(items)))


def factory_arguments(
    batch_size: Any,
    timeout_s: Any,
    inject: Injection | Mapping[str, Any] | None,
    what: str = "vllm_engine_factory",
) -> tuple[int, float | None, Injection]:
    """A factory's arguments, checked: (batch size, deadline or None, faults)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BadMarker(f"{what}: batch_size={batch_size!r} is not a positive integer")
    seconds = None if timeout_s is None else whole_seconds(what, "timeout_s", timeout_s)
    if isinstance(inject, Injection):
        faults = inject
    elif inject is None:
        faults = Injection()
    elif isinstance(inject, Mapping):
        faults = injection(f"{what}(inject=...)", inject)
    else:
        raise BadMarker(f"{what}: inject={inject!r} must be a dict of {', '.join(INJECT_ARGS)}")
    return batch_size, seconds, faults


def count(what: str, name: str, value: Any, meaning: str) -> int:
    """A whole number >= 1, not a bool: how many sequences, tokens, requests."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadMarker(f"{what}: {name}={value!r} is not a whole number >= 1 ({meaning})")
    return value


#: what a handle's caller can do about a prompt and tokens that do not fit
LONGER_ENGINE = ("ask for fewer, or start an engine with a longer one (vllm_engine_factory / "
                 "vllm_server_factory(..., max_model_len=N))")


def fits_context(what: str, prompt_len: int, max_tokens: int, max_model_len: int | None, bos: bool,
                 remedy: str = LONGER_ENGINE) -> None:
    """The prompt and the tokens asked for fit in the engine's context, or vLLM refuses them;
    ``remedy`` says what the caller can do about it."""
    need = prompt_len + max_tokens + int(bos)
    if max_model_len is not None and need > max_model_len:
        raise BadMarker(
            f"{what}: prompt_len={prompt_len} + max_tokens={max_tokens}"
            + (" + 1 (the tokenizer's BOS token)" if bos else "")
            + f" is {need} tokens, more than the engine's max_model_len {max_model_len}; {remedy}"
        )


def batch_arguments(what: str, n: Any, max_tokens: Any, prompt_len: Any, each: str, prompt: str) -> None:
    """What ``generate`` and ``complete`` share: how many, how many tokens each, how long a prompt."""
    if n is not None:
        count(what, "n", n, f"{each}s at once; None: the handle's batch size")
    count(what, "max_tokens", max_tokens, f"tokens to generate per {each}")
    count(what, "prompt_len", prompt_len, f"prompt {prompt} per {each}")


def generate_arguments(
    n: Any, max_tokens: Any, prompt_len: Any, arriving: Any, max_model_len: int | None,
    what: str = "EngineHandle.generate",
) -> None:
    """``EngineHandle.generate``'s arguments, checked before the engine sees any of them."""
    batch_arguments(what, n, max_tokens, prompt_len, "sequence", "tokens")
    if isinstance(arriving, (list, tuple)):
        if not arriving:
            raise BadMarker(f"{what}: arriving={arriving!r} is empty (requests that join before each "
                            "engine step, one count per step; None: all at once)")
        for k in arriving:
            count(what, "arriving", k, f"in {arriving!r}: requests that join before each engine step")
    elif arriving is not None:
        count(what, "arriving", arriving, "requests that join before each engine step, or a list of "
               "counts, one per step; None: all at once")
    fits_context(what, prompt_len, max_tokens, max_model_len, bos=False)


def complete_arguments(
    n: Any, max_tokens: Any, prompt_len: Any, stream: Any, max_model_len: int | None, bos: bool,
    what: str = "ServerHandle.complete",
) -> None:
    """``ServerHandle.complete``'s arguments, checked before any request is sent."""
    batch_arguments(what, n, max_tokens, prompt_len, "request", "words")
    if not isinstance(stream, bool):
        raise BadMarker(f"{what}: stream={stream!r} is not True or False")
    fits_context(what, prompt_len, max_tokens, max_model_len, bos)


#: the factories' own keyword arguments (beside the engine's or server's)
FACTORY_ARGS = ("batch_size", "timeout_s", "inject", "model", "nodes")
