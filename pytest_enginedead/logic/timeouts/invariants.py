"""Named invariants of a timeout policy, behind the ``enginedead_invariants`` marker.

Each check returns the messages of what breaks it, with the numbers, e.g.
``grows_with_batch: timeout_s(CPU, 8) = 300.0 s but timeout_s(CPU, 64) = 300.0 s``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .policies import STOCK_DEADLINE_S, Backend, PolicyLike

#: A standard spread of batch sizes every check covers, beside the configured ones.
STANDARD_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 16384, 65536)
#: "a huge batch": where a capped policy must have stopped growing.
HUGE_BATCH = 1 << 20

DEFAULT_HEADROOM = 3.0


@dataclass(frozen=True)
class InvariantInput:
    """What the invariants are judged on."""

    policy: PolicyLike
    batch_sizes: tuple[int, ...]
    cap_s: float | None = None
    headroom: float | None = None
    #: measured step seconds per batch size (the worst seen), for ``headroom``
    step_times: Mapping[int, float] | None = None


Probe = Callable[[Backend, int], float]


def _fmt(backend: Backend, n: int, value: float) -> str:
    return f"timeout_s({backend.name}, {n}) = {value:.1f} s"


def _ceiling(inp: InvariantInput, backend: Backend) -> float:
    if inp.cap_s is not None:
        return inp.cap_s
    ceiling = getattr(inp.policy, "ceiling_s", None)
    return float(ceiling(backend)) if callable(ceiling) else math.inf


def check_cpu_gt_gpu(inp: InvariantInput, probe: Probe) -> list[str]:
    for n in inp.batch_sizes:
        cpu, gpu = probe(Backend.CPU, n), probe(Backend.GPU, n)
        if not cpu > gpu:
            return [
                f"cpu_gt_gpu: {_fmt(Backend.CPU, n, cpu)} is not greater than "
                f"{_fmt(Backend.GPU, n, gpu)}; a CPU step is far slower than a GPU step"
            ]
    return []


def check_grows_with_batch(inp: InvariantInput, probe: Probe) -> list[str]:
    """Strictly growing until the cap; a plateau is fine only at the cap.

    A declared cap (``cap_s=`` or the policy's ``ceiling_s``) is the cap; otherwise
    the policy's largest value (up to a huge batch) is: growth that ends in a plateau
    there has reached its cap.  A policy that never grows at all fails.
    """
    problems = []
    for backend in Backend:
        declared = _ceiling(inp, backend)
        values = [(n, probe(backend, n)) for n in inp.batch_sizes]
        largest = max(v for _, v in [*values, (HUGE_BATCH, probe(backend, HUGE_BATCH))])
        ceiling = largest if math.isinf(declared) else declared
        if len({v for _, v in values}) == 1 and len(values) > 1:
            (n1, t1), (n2, t2) = values[0], values[-1]
            problems.append(
                f"grows_with_batch: {_fmt(backend, n1, t1)} and {_fmt(backend, n2, t2)}: "
                "it never grows with the batch"
            )
            continue
        for (n1, t1), (n2, t2) in itertools.pairwise(values):
            if t2 < t1 or (t2 == t1 and t1 < ceiling):
                problems.append(
                    f"grows_with_batch: {_fmt(backend, n1, t1)} but {_fmt(backend, n2, t2)}"
                    + ("" if math.isinf(declared) else f" (below its cap of {declared:.1f} s)")
                )
                break
    return problems


def check_capped(inp: InvariantInput, probe: Probe) -> list[str]:
    problems = []
    for backend in Backend:
        ceiling = _ceiling(inp, backend)
        sizes = (*inp.batch_sizes, HUGE_BATCH, 2 * HUGE_BATCH)
        if math.isinf(ceiling):  # no cap declared: it must stop growing by a huge batch
            huge, huger = probe(backend, HUGE_BATCH), probe(backend, 2 * HUGE_BATCH)
            if not (math.isfinite(huge) and huger <= huge):
                problems.append(
                    f"capped: {_fmt(backend, HUGE_BATCH, huge)} but "
                    f"{_fmt(backend, 2 * HUGE_BATCH, huger)}; it never stops growing "
                    "(give cap_s= or a policy with a cap)"
                )
            continue
        for n in sizes:
            value = probe(backend, n)
            if value > ceiling:
                problems.append(f"capped: {_fmt(backend, n, value)} is above the cap of {ceiling:.1f} s")
                break
    return problems


def check_not_below_stock(inp: InvariantInput, probe: Probe) -> list[str]:
    for backend in Backend:
        for n in inp.batch_sizes:
            value = probe(backend, n)
            if value < STOCK_DEADLINE_S:
                return [
                    f"not_below_stock: {_fmt(backend, n, value)} is below vLLM's stock "
                    f"{STOCK_DEADLINE_S:.0f} s; a setup that works today would die sooner"
                ]
    return []


def check_headroom(inp: InvariantInput, probe: Probe) -> list[str]:
    headroom = inp.headroom if inp.headroom is not None else DEFAULT_HEADROOM
    if not inp.step_times:
        return [
            "headroom: no measured step times; run it on an engine test or give "
            "step_times={batch_size: seconds}"
        ]
    problems = []
    for n, step in sorted(inp.step_times.items()):
        value = probe(Backend.CPU, n)
        if value < headroom * step:
            ratio = value / step if step else math.inf
            problems.append(
                f"headroom: {_fmt(Backend.CPU, n, value)} is only {ratio:.2f} x the measured "
                f"step of {step:.3f} s at batch {n}; needs >= {headroom:g} x "
                f"({headroom * step:.1f} s)"
            )
    return problems


CHECKS: dict[str, Callable[[InvariantInput, Probe], list[str]]] = {
    "cpu_gt_gpu": check_cpu_gt_gpu,
    "grows_with_batch": check_grows_with_batch,
    "capped": check_capped,
    "headroom": check_headroom,
    "not_below_stock": check_not_below_stock,
}
NAMES = tuple(CHECKS)


def batch_grid(configured: Iterable[int] = ()) -> tuple[int, ...]:
    """The configured batch sizes plus the standard spread, sorted."""
    return tuple(sorted({*configured, *STANDARD_BATCH_SIZES}))


def unknown_names(names: Sequence[str]) -> list[str]:
    return [n for n in names if n not in CHECKS]


def violations(
    policy: PolicyLike,
    names: Sequence[str],
    *,
    batch_sizes: Iterable[int] = (),
    cap_s: float | None = None,
    headroom: float | None = None,
    step_times: Mapping[int, float] | None = None,
) -> list[str]:
    """Judge ``policy`` by the named invariants; return what breaks them, one line each."""
    unknown = unknown_names(names)
    if unknown:
        raise ValueError(
            f"unknown invariant {', '.join(map(repr, unknown))}; valid: {', '.join(NAMES)}"
        )
    inp = InvariantInput(policy, batch_grid(batch_sizes), cap_s, headroom, step_times)

    def probe(backend: Backend, n: int) -> float:
        call = f"timeout_s({backend.name}, {n})"
        try:
            raw = policy.timeout_s(backend, n)
        except Exception as exc:
            raise _PolicyBroke(f"{call} raised {type(exc).__name__}: {exc}") from None
        try:
            value = float(raw)
        except (TypeError, ValueError, OverflowError):
            raise _PolicyBroke(f"{call} returned {raw!r}, not a number of seconds") from None
        if math.isnan(value):
            raise _PolicyBroke(f"{call} returned {raw!r}")
        return value

    problems: list[str] = []
    for name in names:
        try:
            problems.extend(CHECKS[name](inp, probe))
        except _PolicyBroke as exc:  # the user's policy raised or returned junk: say which call
            problems.append(f"{name}: {exc}")
        except Exception as exc:  # e.g. the policy's ceiling_s
            problems.append(f"{name}: the policy raised {type(exc).__name__}: {exc}")
    return problems


class _PolicyBroke(Exception):
    """One call of the policy raised, or returned what is not a number of seconds."""
