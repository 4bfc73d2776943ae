"""Timeout policies: how long one engine step may take before vLLM declares death.

``TimeoutPolicy`` is the contract: ``policy.timeout_s(backend, max_num_seqs,
max_num_batched_tokens=None) -> float``.  Three come built in:

* ``reference`` — grows with the batch, CPU far above GPU, capped, never below
  vLLM's stock deadline, so no setup that works today dies sooner;
* ``vllm-stock`` — vLLM's own fixed deadline (the bug, for showing it);
* ``calibrated`` — headroom × the step time measured on this machine, clamped to a
  floor and a cap.
"""

from __future__ import annotations

import enum
import importlib
import math
import numbers
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any, Protocol, cast, runtime_checkable

from .. import releases

STOCK_DEADLINE_S = releases.STOCK_DEADLINE_S


class Backend(str, enum.Enum):
    """The backends vLLM runs on."""

    CPU = "cpu"
    GPU = "gpu"
    XPU = "xpu"
    TPU = "tpu"
    HPU = "hpu"
    NPU = "npu"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, value: Backend | str) -> Backend:
        if isinstance(value, Backend):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            valid = ", ".join(b.value for b in cls)
            raise ValueError(f"unknown backend {value!r}; valid: {valid}") from None


@runtime_checkable
class PolicyLike(Protocol):
    """Anything with a ``timeout_s`` can serve as a policy (``module:attr``)."""

    def timeout_s(
        self, backend: Backend, max_num_seqs: int, max_num_batched_tokens: int | None = None
    ) -> float: ...


@dataclass(frozen=True)
class Rule:
    """``clamp(base + per_seq × seqs + per_token × tokens, floor, cap)`` for one backend."""

    base_s: float
    per_seq_s: float
    per_token_s: float = 0.0
    floor_s: float = STOCK_DEADLINE_S
    cap_s: float = math.inf

    def apply(self, max_num_seqs: int, max_num_batched_tokens: int | None) -> float:
        raw = self.base_s + self.per_seq_s * max_num_seqs
        if max_num_batched_tokens:
            raw += self.per_token_s * max_num_batched_tokens
        return min(self.cap_s, max(self.floor_s, raw))


def _freeze(rules: Mapping[Any, Rule]) -> Mapping[Backend, Rule]:
    return MappingProxyType({Backend.parse(b): r for b, r in rules.items()})


def _reference_rules() -> dict[Backend, Rule]:
    """The reference policy's rules (see ``TimeoutPolicy``)."""
    accel = Rule(300.0, 1.0, 0.002, cap_s=3600.0)
    return {
        Backend.CPU: Rule(600.0, 10.0, 0.02, cap_s=7200.0),
        Backend.GPU: Rule(300.0, 0.5, 0.001, cap_s=1800.0),
        Backend.TPU: Rule(300.0, 0.5, 0.001, cap_s=1800.0),
        Backend.XPU: accel,
        Backend.HPU: accel,
        Backend.NPU: accel,
    }


@dataclass(frozen=True)
class TimeoutPolicy:
    """A deadline per backend and batch: ``timeout_s(backend, max_num_seqs, tokens)``.

    ``TimeoutPolicy()`` is the reference policy, which meets every invariant at every
    batch.  CPU: 600 s + 10 s per sequence (+ 0.02 s per batched token), capped at
    2 h.  GPU: 300 s + 0.5 s per sequence, capped at 30 min.  Other accelerators sit
    between.  Every rule starts above the stock 300 s, so none flattens at the floor
    and each grows strictly until its cap.
    """

    name: str = "reference"
    rules: Mapping[Backend, Rule] = field(default_factory=_reference_rules, repr=False)
    #: how the numbers came about, for reports
    origin: str = "built in"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", _freeze(self.rules))
        missing = [b.name for b in Backend if b not in self.rules]
        if missing:
            raise ValueError(f"policy {self.name!r} has no rule for {', '.join(missing)}")

    def timeout_s(
        self,
        backend: Backend | str,
        max_num_seqs: int,
        max_num_batched_tokens: int | None = None,
    ) -> float:
        """The deadline for one step of a ``max_num_seqs`` batch on ``backend``."""
        if isinstance(max_num_seqs, bool) or not isinstance(max_num_seqs, int):
            raise TypeError(f"max_num_seqs must be an int, got {max_num_seqs!r}")
        if max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
        return self.rules[Backend.parse(backend)].apply(max_num_seqs, max_num_batched_tokens)

    def ceiling_s(self, backend: Backend | str) -> float:
        """The most this policy ever allows on ``backend`` (``inf`` if unbounded)."""
        return self.rules[Backend.parse(backend)].cap_s

    # --- the built-in policies ----------------------------------------------------

    @classmethod
    def reference(cls) -> TimeoutPolicy:
        """The reference policy (the same as ``TimeoutPolicy()``)."""
        return cls()

    @classmethod
    def fixed(cls, seconds: float, name: str | None = None, origin: str = "") -> TimeoutPolicy:
        """The same deadline for every backend and batch (vLLM's behaviour)."""
        if not _real(seconds) or not 0 < seconds < math.inf:
            raise ValueError(
                f"TimeoutPolicy.fixed: a deadline must be > 0 s and finite, got {seconds!r}"
            )
        rule = Rule(seconds, 0.0, 0.0, floor_s=0.0, cap_s=math.inf)
        return cls(name or f"fixed-{seconds:g}s", dict.fromkeys(Backend, rule), origin=origin)

    @classmethod
    def vllm_stock(
        cls, environ: Mapping[str, str] | None = None, version: str | None = None
    ) -> TimeoutPolicy:
        """vLLM's fixed deadline: ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` if set, else 300 s."""
        seconds = releases.stock_deadline_s(environ, version)
        return cls.fixed(seconds, name="vllm-stock", origin=f"{seconds:g} s, vLLM's own")

    @classmethod
    def calibrated(
        cls,
        samples: Mapping[int, float] | Iterable[tuple[int, float]],
        headroom: float = 3.0,
        floor_s: float = STOCK_DEADLINE_S,
        cap_s: float = 7200.0,
        backend: Backend | str = Backend.CPU,
    ) -> TimeoutPolicy:
        """``headroom × predicted step time``, clamped to ``[floor_s, cap_s]``.

        ``samples`` are measured ``(batch_size, step_seconds)``; step time is fitted as
        ``a + b × batch`` (least squares, never negative), lifted so that it predicts
        no less than any sample.  Other backends keep the reference rule.
        """
        what = "TimeoutPolicy.calibrated"
        if not _real(headroom) or not 0 < headroom < math.inf:
            raise ValueError(f"{what}: headroom must be > 0 and finite, got {headroom!r}")
        _check_clamp(what, floor_s, cap_s)
        pairs = _samples(samples, what)
        a, b = fit_step_time(pairs)
        # lift the line over every sample: a deadline must cover each measured step
        a += max(0.0, max(s - (a + b * n) for n, s in pairs))
        backend = Backend.parse(backend)
        rules = _reference_rules()
        rules[backend] = Rule(headroom * a, headroom * b, 0.0, floor_s=floor_s, cap_s=cap_s)
        return cls(
            "calibrated",
            rules,
            origin=f"{headroom:g} x ({a:.4g} s + {b:.4g} s/seq) on {backend.name}",
        )

    @classmethod
    def linear(
        cls,
        base_s: float,
        per_seq_s: float,
        per_token_s: float = 0.0,
        floor_s: float = STOCK_DEADLINE_S,
        cap_s: float = 7200.0,
        backend: Backend | str = Backend.CPU,
        name: str = "calibrated",
        origin: str = "",
    ) -> TimeoutPolicy:
        """``base + per_seq x seqs + per_token x tokens``, clamped to ``[floor_s, cap_s]``.

        What ``enginedead calibrate --max-num-seqs ...`` prints for the guard: the
        terms cover the heaviest step a batch of that many sequences and tokens can
        form.  Other backends keep the reference rule.
        """
        what = "TimeoutPolicy.linear"
        for label, value in (("base_s", base_s), ("per_seq_s", per_seq_s), ("per_token_s", per_token_s)):
            if not _real(value) or not 0 <= value < math.inf:
                raise ValueError(f"{what}: {label} must be a finite number >= 0, got {value!r}")
        _check_clamp(what, floor_s, cap_s)
        backend = Backend.parse(backend)
        rules = _reference_rules()
        rules[backend] = Rule(
            float(base_s), float(per_seq_s), float(per_token_s), floor_s=floor_s, cap_s=cap_s
        )
        return cls(name, rules, origin=origin or (
            f"{base_s:.4g} s + {per_seq_s:.4g} s/seq + {per_token_s:.4g} s/token on {backend.name}"))


def _check_clamp(what: str, floor_s: float, cap_s: float) -> None:
    """A policy's floor and cap: finite floor >= 0, cap >= floor and > 0 (may be infinite)."""
    if not _real(floor_s) or not 0 <= floor_s < math.inf:
        raise ValueError(f"{what}: floor_s must be a finite number >= 0, got {floor_s!r}")
    if not _real(cap_s) or math.isnan(cap_s) or cap_s < floor_s or cap_s <= 0:
        raise ValueError(f"{what}: cap_s must be a number >= floor_s ({floor_s!r}) and > 0, got {cap_s!r}")


def _real(value: object) -> bool:
    """A real number (int, float, numpy's), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _samples(
    samples: Mapping[int, float] | Iterable[tuple[int, float]], what: str = "calibration"
) -> list[tuple[int, float]]:
    """``(batch_size, step_seconds)`` pairs, checked: positive whole batches, finite steps >= 0."""
    try:
        items = list(samples.items() if isinstance(samples, Mapping) else samples)
    except TypeError:
        raise ValueError(
            f"{what}: samples must be a {{batch_size: step_seconds}} mapping or (batch_size, "
            f"step_seconds) pairs, not {type(samples).__name__}"
        ) from None
    if not items:
        raise ValueError(f"{what}: calibration needs at least one (batch_size, step_seconds) sample")
    pairs = []
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"{what}: bad calibration sample {item!r}; give (batch_size, step_seconds)")
        n, s = item
        if not _real(n) or n != int(n) or n < 1:
            raise ValueError(f"{what}: bad calibration sample: batch {n!r} is not a whole number >= 1")
        if not _real(s) or not 0 <= s < math.inf:
            raise ValueError(
                f"{what}: bad calibration sample: batch {n!r}, step {s!r} s is not a finite number >= 0"
            )
        pairs.append((int(n), float(s)))
    return pairs


def fit_step_time(samples: Mapping[int, float] | Iterable[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``step ≈ a + b × batch`` with ``a, b ≥ 0``."""
    pairs = _samples(samples, "fit_step_time")
    xs = [float(n) for n, _ in pairs]
    ys = [float(s) for _, s in pairs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:  # one batch size: proportional to the batch
        return 0.0, my / mx
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    a = my - b * mx
    if b < 0:
        return my, 0.0
    if a < 0:  # through the origin instead
        return 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return a, b


class PolicyError(ValueError):
    """A policy spec that cannot be loaded; the message says why."""


class PolicyNotFound(PolicyError):
    """The policy's module is on no search path of this process (``module`` names it)."""

    def __init__(self, message: str, module: str) -> None:
        super().__init__(message)
        self.module = module


def load_policy(spec: str, search_path: Iterable[str] = (), vllm_version: str | None = None) -> PolicyLike:
    """``reference``, ``vllm-stock`` (the deadline of vLLM ``vllm_version``) or ``module:attr`` → a policy."""
    spec = spec.strip()
    if spec == "reference":
        return TimeoutPolicy.reference()
    if spec == "vllm-stock":
        try:
            return TimeoutPolicy.vllm_stock(version=vllm_version)
        except ValueError as exc:  # vLLM's own variable is bad, not the name: say which
            raise PolicyError(str(exc)) from None
    module_name, attr = _module_and_attribute(spec)
    module = _import_policy_module(module_name, search_path)
    obj = _read_attribute(module, module_name, attr, spec)
    return _as_policy(obj, spec)


def _module_and_attribute(spec: str) -> tuple[str, str]:
    """``pkg.mod:attr.path`` → its module name and attribute path; anything else is refused."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PolicyError(f"use reference, vllm-stock or module:attr, not {spec!r}")
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise PolicyError(f"{module_name!r} is not a module name; use reference, vllm-stock or module:attr")
    return module_name, attr


def _import_policy_module(module_name: str, search_path: Iterable[str]) -> ModuleType:
    """The policy's module, imported with ``search_path`` ahead of ``sys.path`` for the import
    only.  The module (or a package above it) on no path is ``PolicyNotFound``; a module it
    imports that is missing, or any failure of its own code (even an exit), is a
    ``PolicyError`` that says what it raised."""
    added = [p for p in search_path if p not in sys.path]
    sys.path[:0] = added
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise PolicyNotFound(f"no module named {exc.name!r}", exc.name) from None
        raise PolicyError(f"importing {module_name!r} failed: {exc}") from None
    except (Exception, SystemExit) as exc:  # user code: a module may even exit at import
        raise PolicyError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    finally:
        for p in added:
            if p in sys.path:
                sys.path.remove(p)


def _read_attribute(module: ModuleType, module_name: str, attr: str, spec: str) -> Any:
    """``attr`` (dotted) read from ``module``: a missing name, or one whose reading raised in
    the user's code, is a ``PolicyError``."""
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PolicyError(f"module {module_name!r} has no attribute {attr!r}") from None
        except Exception as exc:  # a property or module __getattr__ of the user's raised
            raise PolicyError(f"{spec}: reading {part!r} raised {type(exc).__name__}: {exc}") from None
    return obj


def _as_policy(obj: object, spec: str) -> PolicyLike:
    """``obj`` as a policy: it must have a callable ``timeout_s``."""
    try:
        usable = callable(getattr(obj, "timeout_s", None))
    except Exception as exc:
        raise PolicyError(f"{spec}: reading timeout_s raised {type(exc).__name__}: {exc}") from None
    if not usable:
        raise PolicyError(
            f"{spec} is a {type(obj).__name__} with no callable timeout_s(backend, max_num_seqs)"
        )
    return cast(PolicyLike, obj)


def policy_name(policy: object, fallback: str) -> str:
    """How messages name a policy: its ``name`` if it has a usable one, else ``fallback``."""
    try:
        name = getattr(policy, "name", None)
    except Exception:
        name = None
    return name if isinstance(name, str) and name else fallback


class PolicyFailure(Exception):
    """The active policy raised, or returned a deadline vLLM cannot use."""


def deadline_problem(value: object) -> str | None:
    """Why ``value`` cannot be a deadline vLLM holds, or None: a real number (int or float, not
    a bool or a string), finite, at least 1 s (vLLM's smallest), at most ``releases.MAX_DEADLINE_S``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"not a number of seconds ({type(value).__name__}; give an int or a float)"
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 1:
        return "a deadline must be a finite number of seconds >= 1 (vLLM's smallest)"
    if seconds > releases.MAX_DEADLINE_S:
        return (
            f"a deadline must be at most {releases.MAX_DEADLINE_S} s, the longest wait vLLM can make "
            "(Python's threading.TIMEOUT_MAX)"
        )
    return None


def policy_deadline(policy: PolicyLike, policy_name: str, batch_size: int) -> float:
    """The policy's deadline for a CPU engine at ``batch_size``: see ``deadline_problem``.

    The one place a policy is asked for a deadline; ``PolicyFailure`` says which
    policy returned (or raised) what, for which backend and batch.
    """
    call = f"policy {policy_name}: timeout_s(CPU, {batch_size})"
    try:
        raw = policy.timeout_s(Backend.CPU, batch_size)
    except Exception as exc:
        raise PolicyFailure(f"{call} raised {type(exc).__name__}: {exc}") from None
    problem = deadline_problem(raw)
    if problem is not None:
        sep = ", " if problem.startswith("not a number") else "; "
        raise PolicyFailure(f"{call} returned {raw!r}{sep}{problem}")
    return float(raw)
