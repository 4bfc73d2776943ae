"""``enginedead merge``: one verdict table from the reports of many shards, releases, machines.

Pure but for reading the reports.  Step figures hold for the machine that measured them
(``fingerprint``), so the table keeps each machine's apart, labelled M1, M2, ...; nothing
is pooled into one percentile across machines.  Calibrations from different machines
cannot be merged at all: their deadlines would mix two machines' steps.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr

from .. import machine
from ..words import plural
from .report import SCHEMA_VERSION
from .rows import TestRow


class MergeError(ValueError):
    """An input that is not a report (or not one that can be merged); the message says which."""


@dataclass(frozen=True)
class Loaded:
    """One input: its path and what it holds (``kind``: "report" or "calibration")."""

    path: str
    kind: str
    data: dict[str, Any]

    @property
    def machine(self) -> dict[str, Any]:
        found = self.data.get("machine")
        return found if isinstance(found, dict) else {}


def parse(text: str, path: str) -> Loaded:
    """A report's (or a calibration's) text → ``Loaded``; anything else is a MergeError."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MergeError(
            f"{path} is not an enginedead report: not JSON, or cut short ({str(exc).splitlines()[0]})"
        ) from None
    if not isinstance(data, dict):
        raise MergeError(f"{path} is not an enginedead report: it holds a JSON {type(data).__name__}")
    if "schema_version" in data:
        if data["schema_version"] != SCHEMA_VERSION:
            raise MergeError(
                f"{path}: report schema_version {data['schema_version']!r}; "
                f"this enginedead reads {SCHEMA_VERSION}"
            )
        for key, kind in (("tests", list), ("engines", list), ("machine", dict)):
            if not isinstance(data.get(key), kind):
                raise MergeError(
                    f"{path} is not a whole enginedead report: {key!r} is missing or not a {kind.__name__}"
                )
        return Loaded(path, "report", data)
    if isinstance(data.get("fit"), dict) and isinstance(data.get("results"), list):
        return Loaded(path, "calibration", data)
    raise MergeError(
        f"{path} is not an enginedead report (no 'schema_version'); give the files that "
        "--enginedead-report or `enginedead check --report` wrote"
    )


def load(path: str) -> Loaded:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise MergeError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MergeError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse(text, path)


def machine_words(m: Mapping[str, Any]) -> str:
    """A machine in a few words: CPU, cores used, ISA, torch and vLLM."""
    isa = "/".join(m.get("isa_flags") or []) or "no AVX"
    return (f"{m.get('cpu_model') or 'unknown CPU'}, {m.get('cores_used', '?')} cores, {isa}, "
            f"torch {m.get('torch')}, vLLM {m.get('vllm')}")


@dataclass
class Merged:
    """The merge: every test row with its machine, the machines, and what is wrong."""

    inputs: list[Loaded]
    machines: list[dict[str, Any]] = field(default_factory=list)
    #: (input index, machine index, test row)
    rows: list[tuple[int, int, TestRow]] = field(default_factory=list)
    #: per input, the index of its machine in ``machines``
    machine_of: list[int] = field(default_factory=list)
    #: what makes the merge fail (exit 1): false deaths under the policy, missing shards
    problems: list[str] = field(default_factory=list)

    @property
    def false_deaths(self) -> list[TestRow]:
        """False deaths whose deadline was the policy's, or whose engine had the guard on."""
        return [r for _, _, r in self.rows if r.false_under_policy]


def _rows(x: Loaded) -> list[TestRow]:
    """A report's test rows (``TestRow.from_dict``); a row it cannot read is a MergeError."""
    try:
        return [TestRow.from_dict(row) for row in x.data["tests"] if isinstance(row, dict)]
    except (KeyError, ValueError, TypeError) as exc:
        raise MergeError(f"{x.path} holds a test row this enginedead cannot read ({exc!r})") from None


def _machine_index(machines: list[dict[str, Any]], m: dict[str, Any]) -> int:
    for i, known in enumerate(machines):
        if machine.same_machine(known, m):
            return i
    machines.append(m)
    return len(machines) - 1


def merge(inputs: Sequence[Loaded]) -> Merged:
    """One table from ``inputs``; calibrations from different machines are a MergeError."""
    merged = Merged(list(inputs))
    calibrations = [x for x in inputs if x.kind == "calibration"]
    for x in calibrations[1:]:
        differ = machine.differences(calibrations[0].machine, x.machine)
        if differ:
            raise MergeError(
                f"{x.path} and {calibrations[0].path} are calibrations from different machines "
                f"(they differ in {', '.join(differ)}): their deadlines cannot be merged; "
                "calibrate each machine on its own"
            )
    for i, x in enumerate(inputs):
        m = _machine_index(merged.machines, x.machine)
        merged.machine_of.append(m)
        if x.kind == "report":
            merged.rows.extend((i, m, row) for row in _rows(x))
    merged.problems.extend(_shard_problems([x for x in inputs if x.kind == "report"]))
    for row in merged.false_deaths:
        merged.problems.append(
            f"false death under the policy: {row.nodeid} (batch {row.batch_size}, "
            f"deadline {row.deadline_s} s from {row.deadline_source})"
        )
    return merged


def _shard_groups(reports: Sequence[Loaded]) -> dict[tuple[Any, int, int], list[Loaded]]:
    """The sharded reports by split: (vLLM release, shard count, tests collected)."""
    groups: dict[tuple[Any, int, int], list[Loaded]] = {}
    for x in reports:
        shard = x.data.get("shard")
        if isinstance(shard, dict):
            vllm = (x.data.get("vllm") or {}).get("version")
            key = (vllm, int(shard.get("count", 0)), int(shard.get("collected", 0)))
            groups.setdefault(key, []).append(x)
    return groups


def _listed(shards: Sequence[int], count: int) -> str:
    return ", ".join(f"{k}/{count}" for k in shards)


def _tests_twice(where: str, members: Sequence[Loaded]) -> tuple[list[str], int]:
    """Each test one shard ran that another shard ran too, and how many tests the shards hold."""
    problems = []
    seen: dict[str, str] = {}
    total = 0
    for x in members:
        tests = x.data["shard"].get("tests") or []
        total += len(tests)
        for t in tests:
            if t in seen and seen[t] != x.path:
                problems.append(f"{where}: {t} ran in {seen[t]} and in {x.path}")
            seen.setdefault(t, x.path)
    return problems, total


def _split_problems(vllm: Any, count: int, collected: int, members: Sequence[Loaded]) -> list[str]:
    """One split's shards: all present, none twice, each test in one of them only, all collected."""
    where = f"vLLM {vllm}, {count} shards of {collected} tests"
    indices = [int(x.data["shard"].get("index", 0)) for x in members]
    missing = sorted(set(range(1, count + 1)) - set(indices))
    twice = sorted({k for k in indices if indices.count(k) > 1})
    problems = []
    if missing:
        problems.append(f"{where}: shard {_listed(missing, count)} missing")
    if twice:
        problems.append(f"{where}: shard {_listed(twice, count)} given twice")
    doubled, total = _tests_twice(where, members)
    problems += doubled
    if not missing and not twice and total != collected:
        problems.append(f"{where}: the shards hold {total} tests, the collection {collected}")
    return problems


def _shard_problems(reports: Sequence[Loaded]) -> list[str]:
    """Shards of one split: all present, none twice, each test in one of them only."""
    problems = []
    for (vllm, count, collected), members in _shard_groups(reports).items():
        problems += _split_problems(vllm, count, collected, members)
    return problems


def _fmt_s(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3f}s"


def table(merged: Merged) -> str:
    """The verdict table: one line per engine test, with the release and the machine."""
    lines = ["machines:"]
    lines.extend(f"  M{i + 1}: {machine_words(m)}" for i, m in enumerate(merged.machines))
    lines.append("")
    lines.append(f"{'vllm':<8} {'machine':<7} {'batch':>5}  {'deadline':>8}  {'steps':>5}  "
                 f"{'p50':>8}  {'max':>8}  {'verdict':<8} test")
    for i, m, row in sorted(merged.rows, key=lambda r: (_vllm(merged.inputs[r[0]]), r[2].nodeid)):
        lines.append(
            f"{_vllm(merged.inputs[i]):<8} {'M' + str(m + 1):<7} {row.batch_size:>5}  "
            f"{str(row.deadline_s) + 's':>8}  {row.steps:>5}  "
            f"{_fmt_s(row.step_p50_s):>8}  {_fmt_s(row.step_max_s):>8}  "
            f"{(row.verdict.name if row.verdict else '-'):<8} {row.nodeid}"
        )
    lines.append("")
    lines.extend(_step_figures(merged))
    calibrations = [i for i, x in enumerate(merged.inputs) if x.kind == "calibration"]
    if calibrations:  # merge refused calibrations of different machines: one machine holds them all
        lines.append(f"calibrations: {len(calibrations)}, all on M{merged.machine_of[calibrations[0]] + 1}")
    return "\n".join(lines)


def _vllm(x: Loaded) -> str:
    v = x.data.get("vllm")
    return str((v.get("version") if isinstance(v, dict) else v) or "?")


def _step_figures(merged: Merged) -> list[str]:
    """Per machine and release: the p50 of the tests' step p50s and the longest step, never pooled."""
    by: dict[tuple[int, str], list[TestRow]] = {}
    for i, m, row in merged.rows:
        by.setdefault((m, _vllm(merged.inputs[i])), []).append(row)
    out = []
    for (m, vllm), rows in sorted(by.items()):
        p50s = [r.step_p50_s for r in rows if r.step_p50_s is not None]
        maxes = [r.step_max_s for r in rows if r.step_max_s is not None]
        if p50s:
            out.append(f"steps on M{m + 1}, vLLM {vllm}: {len(rows)} tests, median of their p50s "
                       f"{statistics.median(p50s):.3f}s, longest {max(maxes, default=0.0):.3f}s")
    return out


def summary(merged: Merged) -> str:
    """The one verdict line."""
    reports = sum(1 for x in merged.inputs if x.kind == "report")
    head = (f"enginedead merge: {plural(reports, 'report')}, {plural(len(merged.rows), 'engine test')}, "
            f"{plural(len(merged.machines), 'machine')}")
    if merged.problems:
        return f"{head}: FAILED\n" + "\n".join(f"  {p}" for p in merged.problems)
    return f"{head}: no false death under the policy, every shard present"


def to_json(merged: Merged) -> dict[str, Any]:
    return {
        "inputs": [{"path": x.path, "kind": x.kind, "vllm": _vllm(x),
                    "shard": x.data.get("shard", {}).get("index") if x.kind == "report" else None}
                   for x in merged.inputs],
        "machines": merged.machines,
        "tests": [{**row.to_dict(), "input": merged.inputs[i].path, "machine": m + 1}
                  for i, m, row in merged.rows],
        "false_deaths": len(merged.false_deaths),
        "problems": merged.problems,
        "ok": not merged.problems,
    }


def junit_xml(merged: Merged) -> str:
    """JUnit XML: one testcase per engine test; a false death under the policy fails it."""
    cases = []
    for i, m, row in merged.rows:
        name = quoteattr(row.nodeid)
        klass = quoteattr(f"enginedead.vllm-{_vllm(merged.inputs[i])}.M{m + 1}")
        body = ""
        if row.false_under_policy:
            message = quoteattr(f"false engine death at batch {row.batch_size}")
            body = f"<failure message={message}/>"
        cases.append(f"  <testcase classname={klass} name={name}>{body}</testcase>")
    failures = len(merged.false_deaths)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name="enginedead-merge" tests="{len(cases)}" failures="{failures}">\n'
        + "\n".join(cases) + ("\n" if cases else "") + "</testsuite>\n"
    )
