"""The soak's fault schedule: a small TOML or JSON file, read and checked before anything starts.

    deadline_s = 2        # vLLM's VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS for the run
    hang_s = 5            # the guard's ENGINEDEAD_GUARD_HANG_S
    max_num_seqs = 16
    max_model_len = 512
    clients = 8           # steady clients, each with one request in flight
    repeat = true         # go through the faults again until the time is up

    [[faults]]
    kind = "slow"         # every step burns CPU past the deadline, for `steps` steps
    after_s = 20          # seconds of traffic after the previous fault's window closed
    steps = 3
    over = 1.5            # a step of the clients' batch runs ~1.5 x the deadline

Kinds: ``slow`` (steps, over, ranks), ``hang`` (ranks: idle in the step's middle layer),
``spin`` (ranks: 100 % CPU in the middle layer, never advancing), ``kill`` (ranks),
``context_limit`` (requests: prompts of max_model_len - max_tokens tokens),
``disconnect`` (requests, after_chunks: streams the client closes mid-way), ``burst``
(factor: that many x max_num_seqs requests at once), ``guidellm`` (requests, streams: the
third-party load generator, when installed).  A bad schedule is one line naming the file,
the entry and the value (``ScheduleError``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: the kinds the judge treats apart (a fault kind, not a verdict: ``contract.decisions`` has those)
SLOW_FAULT, HANG_FAULT, SPIN_FAULT, KILL_FAULT = "slow", "hang", "spin", "kill"

#: fields every fault takes, and each kind's own with their defaults
COMMON = {"kind": None, "after_s": 15.0}
KINDS: dict[str, dict[str, Any]] = {
    SLOW_FAULT: {"steps": 3, "over": 1.5, "ranks": None},
    HANG_FAULT: {"ranks": None},
    SPIN_FAULT: {"ranks": None},
    KILL_FAULT: {"ranks": None},
    "context_limit": {"requests": 4, "max_tokens": 8},
    "disconnect": {"requests": 8, "after_chunks": 2},
    "burst": {"factor": 2.0, "max_tokens": 16},
    "guidellm": {"requests": 32, "streams": 32},
}
#: the kinds whose window ends the engine: the server exits and the supervisor restarts it
FATAL = (HANG_FAULT, SPIN_FAULT, KILL_FAULT)

#: the kinds the guard must end after hang_s (a hang sits idle, a spin burns a core; neither advances)
STUCK = (HANG_FAULT, SPIN_FAULT)

#: the schedule's own settings and their defaults
SETTINGS: dict[str, Any] = {
    "deadline_s": 2, "hang_s": 5.0, "max_num_seqs": 16, "max_model_len": 512, "clients": 8,
    "tensor_parallel_size": 1, "repeat": True, "faults": None,
}


class ScheduleError(ValueError):
    """A schedule that cannot run, in one line naming where."""


@dataclass(frozen=True)
class Fault:
    """One entry of the schedule: what to do, after how long, with what."""

    kind: str
    after_s: float
    index: int  # its place in the file (faults[index])
    params: Mapping[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        return self.params.get(name, KINDS[self.kind][name])

    @property
    def ranks(self) -> tuple[int, ...] | None:
        ranks = self.params.get("ranks")
        return None if ranks is None else tuple(ranks)

    @property
    def fatal(self) -> bool:
        return self.kind in FATAL

    def label(self) -> str:
        extra = f" on rank{'s' if len(self.ranks or ()) != 1 else ''} {', '.join(map(str, self.ranks))}" \
            if self.ranks else ""
        return f"faults[{self.index}] {self.kind}{extra}"


@dataclass(frozen=True)
class Schedule:
    """A whole schedule: the run's settings and its faults, in order."""

    faults: tuple[Fault, ...]
    deadline_s: int = 2
    hang_s: float = 5.0
    max_num_seqs: int = 16
    max_model_len: int = 512
    clients: int = 8
    tensor_parallel_size: int = 1
    repeat: bool = True
    source: str = "schedule"

    def passes(self) -> int | None:
        """How many times the faults are gone through: None = until the time is up."""
        return None if self.repeat else 1

    def describe(self) -> str:
        kinds = ", ".join(f.label().split(" ", 1)[1] for f in self.faults)
        return (f"{os.path.basename(self.source)}: {kinds}; deadline {self.deadline_s} s, hang_s "
                f"{self.hang_s:g} s, {self.clients} clients, max_num_seqs {self.max_num_seqs}"
                f"{f', TP={self.tensor_parallel_size}' if self.tensor_parallel_size > 1 else ''}")


def load(path: str) -> Schedule:
    """The schedule in ``path`` (``.toml`` or ``.json``), checked; ``ScheduleError`` in one line."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ScheduleError(f"schedule {path}: cannot read it ({exc.strerror or exc})") from None
    return parse(raw.decode("utf-8", errors="replace"), path)


def parse(text: str, source: str) -> Schedule:
    """A schedule from its text; TOML unless ``source`` ends in ``.json``."""
    name = os.path.basename(source)
    try:
        if source.endswith(".json"):
            data = json.loads(text)
        else:
            import tomllib  # type: ignore[import-not-found,unused-ignore]  # Python 3.11+; JSON everywhere

            data = tomllib.loads(text)
    except ImportError:
        raise ScheduleError(f"schedule {name}: TOML needs Python 3.11 or later; write it as .json") from None
    except ValueError as exc:
        raise ScheduleError(f"schedule {name}: not valid {'JSON' if source.endswith('.json') else 'TOML'} "
                            f"({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ScheduleError(f"schedule {name}: the top level must be a table of settings and [[faults]]")
    return from_dict(data, source)


def from_dict(data: Mapping[str, Any], source: str = "schedule") -> Schedule:
    """A schedule from its parsed form; ``ScheduleError`` names the first bad entry."""
    name = f"schedule {os.path.basename(source)}"
    unknown = sorted(set(data) - set(SETTINGS))
    if unknown:
        raise ScheduleError(f"{name}: unknown setting {unknown[0]!r}; known: "
                            f"{', '.join(k for k in SETTINGS if k != 'faults')}, [[faults]]")
    settings: dict[str, Any] = {
        "deadline_s": _whole(data, "deadline_s", name, 1),
        "hang_s": _seconds(data, "hang_s", name, above=0.0),
        "max_num_seqs": _whole(data, "max_num_seqs", name, 1),
        "max_model_len": _whole(data, "max_model_len", name, 16),
        "clients": _whole(data, "clients", name, 1),
        "tensor_parallel_size": _whole(data, "tensor_parallel_size", name, 1),
        "repeat": _switch(data, "repeat", name),
    }
    raw = data.get("faults")
    if not isinstance(raw, list) or not raw:
        raise ScheduleError(f"{name}: no faults: give at least one [[faults]] entry with a kind "
                            f"({', '.join(KINDS)})")
    faults = tuple(_fault(entry, i, name, settings) for i, entry in enumerate(raw))
    return Schedule(faults=faults, source=source, **settings)


def _fault(entry: Any, i: int, name: str, settings: Mapping[str, Any]) -> Fault:
    where = f"{name}: faults[{i}]"
    if not isinstance(entry, dict):
        raise ScheduleError(f"{where}: must be a table (kind = ..., after_s = ...), not {entry!r}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ScheduleError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    where = f"{where} (kind {kind!r})"
    known = {**COMMON, **KINDS[kind]}
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise ScheduleError(f"{where}: unknown key {unknown[0]!r}; a {kind} fault takes "
                            f"{', '.join(k for k in known if k != 'kind')}")
    after = _seconds(entry, "after_s", where, default=COMMON["after_s"], at_least=0.0)
    params: dict[str, Any] = {}
    for key in KINDS[kind]:
        if key not in entry:
            continue
        if key == "ranks":
            params[key] = _ranks(entry[key], where, settings["tensor_parallel_size"])
        elif key in ("over", "factor"):
            params[key] = _seconds(entry, key, where, above=1.0, what="a factor")
        else:
            params[key] = _whole(entry, key, where, 1)
    max_tokens = params.get("max_tokens", KINDS[kind].get("max_tokens", 0))
    if kind == "context_limit" and max_tokens >= settings["max_model_len"]:
        raise ScheduleError(f"{where}: max_tokens {max_tokens} leaves no prompt under "
                            f"max_model_len {settings['max_model_len']}")
    return Fault(kind, after, i, params)


def _ranks(value: Any, where: str, tp: int) -> list[int]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(r, int) and not isinstance(r, bool) for r in value)):
        raise ScheduleError(f"{where}: ranks={value!r} must be a list of rank numbers, e.g. [1]")
    bad = [r for r in value if not 0 <= r < tp]
    if bad:
        raise ScheduleError(f"{where}: rank {bad[0]} does not exist at tensor_parallel_size {tp} "
                            f"(ranks 0-{tp - 1})")
    return list(value)


def _whole(data: Mapping[str, Any], key: str, where: str, least: int) -> int:
    value = data.get(key, SETTINGS.get(key) if key in SETTINGS else _kind_default(key))
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ScheduleError(f"{where}: {key}={value!r} must be a whole number >= {least}")
    return value


def _kind_default(key: str) -> Any:
    for params in KINDS.values():
        if key in params:
            return params[key]
    return None


def _seconds(data: Mapping[str, Any], key: str, where: str, default: Any = None, above: float | None = None,
             at_least: float | None = None, what: str = "a number of seconds") -> float:
    value = data.get(key, SETTINGS.get(key, default))
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and above is not None:
        ok = value > above
    if ok and at_least is not None:
        ok = value >= at_least
    if not ok:
        bound = f"above {above:g}" if above is not None else f">= {at_least:g}"
        raise ScheduleError(f"{where}: {key}={value!r} must be {what} {bound}")
    return float(value)


def _switch(data: Mapping[str, Any], key: str, where: str) -> bool:
    value = data.get(key, SETTINGS[key])
    if not isinstance(value, bool):
        raise ScheduleError(f"{where}: {key}={value!r} must be true or false")
    return value
