"""Shards that keep engines whole: which collected tests run in shard K of N.

Pure: no pytest, no vLLM, no processes.  The tests that share an engine configuration
form one unit and go to one shard together, so each configuration starts in exactly
one shard.  Units are dealt heaviest first to the lightest shard: by recorded durations
where there are some (``Durations``), else by tests and engine starts.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..inputs.values import Shard
from ..words import plural

#: the durations file's marker key and the format version it holds
DURATIONS_KEY = "enginedead_durations"
DURATIONS_VERSION = 1
#: without durations, one engine start weighs as much as this many tests
ENGINE_START_AS_TESTS = 10.0
#: what ``{vllm}`` in a durations path becomes when vLLM is not installed
NO_VLLM = "none"


class ShardError(ValueError):
    """A shard, or a durations file, that cannot be used; the message says why."""


@dataclass(frozen=True)
class Unit:
    """Tests that must run in one shard: those of one engine configuration, or one test."""

    tests: tuple[int, ...]  # indices into the collection
    engines: int  # engine configurations it starts (0 or 1)


def units(keys: Sequence[Hashable | None]) -> list[Unit]:
    """``keys[i]``: test i's engine configuration, or None (no planned engine: a unit alone).

    Units come in the order of their first test, so the deal is the same on every
    machine and every xdist worker that collects the same tests.
    """
    members: list[list[int]] = []
    engines: list[int] = []
    slot: dict[Hashable, int] = {}
    for i, key in enumerate(keys):
        if key is not None and key in slot:
            members[slot[key]].append(i)
            continue
        if key is not None:
            slot[key] = len(members)
        members.append([i])
        engines.append(0 if key is None else 1)
    return [Unit(tuple(m), e) for m, e in zip(members, engines, strict=True)]


@dataclass(frozen=True)
class Durations:
    """Recorded seconds per test id (setup + call + teardown), from one vLLM release."""

    seconds: Mapping[str, float]
    vllm: str

    def to_json(self, machine: Mapping[str, Any] | None = None) -> str:
        data: dict[str, Any] = {DURATIONS_KEY: DURATIONS_VERSION, "vllm": self.vllm}
        if machine:
            data["machine"] = dict(machine)
        data["tests"] = {k: round(v, 3) for k, v in sorted(self.seconds.items())}
        return json.dumps(data, indent=1) + "\n"


def read_durations(text: str, where: str, vllm: str) -> Durations:
    """A durations file's text → ``Durations``; not one, or another release's: refused."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ShardError(f"{where} is not a durations file: not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or DURATIONS_KEY not in data:
        raise ShardError(
            f"{where} is not an enginedead durations file (no {DURATIONS_KEY!r} key); "
            "write one with --enginedead-store-durations"
        )
    if data[DURATIONS_KEY] != DURATIONS_VERSION:
        raise ShardError(
            f"{where}: durations format {data[DURATIONS_KEY]!r}, this plugin reads {DURATIONS_VERSION}"
        )
    if data.get("vllm") != vllm:
        raise ShardError(
            f"{where} was recorded on vLLM {data.get('vllm')!r}, this run has {vllm!r}; "
            "give the file of this release (a {vllm} in the path picks it)"
        )
    tests = data.get("tests")
    if not isinstance(tests, dict):
        raise ShardError(f"{where}: 'tests' must map test ids to seconds")
    seconds: dict[str, float] = {}
    for nodeid, value in tests.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0:
            raise ShardError(f"{where}: {nodeid!r} has {value!r}, not a number of seconds >= 0")
        seconds[str(nodeid)] = float(value)
    return Durations(seconds, vllm)


def durations_path(template: str, vllm: str | None) -> str:
    """A durations path with ``{vllm}`` replaced by the installed release."""
    return template.replace("{vllm}", vllm or NO_VLLM)


def weights(found: Sequence[Unit], nodeids: Sequence[str], durations: Durations | None) -> list[float]:
    """Each unit's expected cost: recorded seconds (a test not recorded costs the median
    of those that are), else one per test plus ``ENGINE_START_AS_TESTS`` per engine."""
    if durations is None or not durations.seconds:
        return [len(u.tests) + ENGINE_START_AS_TESTS * u.engines for u in found]
    known = [durations.seconds[n] for n in nodeids if n in durations.seconds]
    typical = statistics.median(known) if known else statistics.median(durations.seconds.values())
    return [sum(durations.seconds.get(nodeids[i], typical) for i in u.tests) for u in found]


def deal(costs: Sequence[float], count: int) -> list[int]:
    """Shard (from 0) per unit: heaviest first, each to the lightest shard so far."""
    loads = [0.0] * count
    where = [0] * len(costs)
    for u in sorted(range(len(costs)), key=lambda u: (-costs[u], u)):
        shard = min(range(count), key=lambda s: (loads[s], s))
        where[u] = shard
        loads[shard] += costs[u]
    return where


@dataclass(frozen=True)
class Split:
    """What one shard keeps, and the whole deal for the header line."""

    keep: list[int]  # indices into the collection, in collection order
    shard: Shard
    loads: list[float]  # expected cost per shard
    engines: list[int]  # engine configurations per shard
    by: str  # "recorded durations" / "tests and engine starts"

    def to_dict(self, nodeids: Sequence[str]) -> dict[str, Any]:
        """The report's ``shard``: which tests of the collection ``nodeids`` this shard kept."""
        return {
            "index": self.shard.index, "count": self.shard.count, "collected": len(nodeids),
            "tests": [nodeids[i] for i in self.keep],
            "engine_configurations": self.engines[self.shard.index - 1], "balanced_by": self.by,
        }

    def describe(self) -> str:
        i = self.shard.index - 1
        return (
            f"shard {self.shard}: {plural(len(self.keep), 'test')}, "
            f"{plural(self.engines[i], 'engine configuration')}, "
            f"balanced by {self.by}"
        )


def split(
    keys: Sequence[Hashable | None], nodeids: Sequence[str], shard: Shard, durations: Durations | None = None
) -> Split:
    """The tests of ``shard``: every test in exactly one shard, each configuration whole."""
    found = units(keys)
    costs = weights(found, nodeids, durations)
    where = deal(costs, shard.count)
    loads = [0.0] * shard.count
    engines = [0] * shard.count
    for idx, s in enumerate(where):
        loads[s] += costs[idx]
        engines[s] += found[idx].engines
    keep = sorted(i for u, s in zip(found, where, strict=True) if s == shard.index - 1 for i in u.tests)
    by = "recorded durations" if durations is not None and durations.seconds else "tests and engine starts"
    return Split(keep, shard, loads, engines, by)
