"""What the run found, for the person at the terminal and the files the run writes.

The rows are ``logic.reporting.report``'s; the summary is printed only when engines ran.
"""

from __future__ import annotations

from typing import Any

from ..harness.cleanup import KILL_WAIT_S
from ..harness.outputs import Output, claim
from ..logic.machine import this_machine
from ..logic.reporting.report import (
    Results,
    RunFacts,
    _fmt_s,
    build,
    dumps,
    guard_tally,
    time_breakdown,
    time_lines,
)
from ..logic.words import plural


def terminal_summary(tr: Any, results: Results, policy_name: str) -> None:
    """Only when engines ran: a line per engine configuration, then the count; last, any process
    an engine left behind."""
    rows = results.engines
    if not rows:
        return
    _engine_lines(tr, results, policy_name)
    for label, who in results.survivors():
        tr.write_line(f"enginedead: ERROR: a process of engine {label} outlived SIGKILL by "
                      f"{KILL_WAIT_S:g} s: {who}; the run fails.  Stop it by its pid once the kernel "
                      "lets go of it (/proc/PID/stack says where it waits)", red=True)


def _engine_lines(tr: Any, results: Results, policy_name: str) -> None:
    rows = results.engines
    false = sum(r["false_deaths"] for r in rows)
    genuine = sum(r["genuine_deaths"] for r in rows)
    if tr.config.getoption("verbose") < 0:
        tr.write_line(
            f"enginedead: {plural(len(rows), 'engine')} started, {plural(false, 'false death')}, "
            f"{plural(genuine, 'genuine death')}"
        )
        return
    tr.write_sep("=", "enginedead")
    tr.write_line(
        f"{'batch':>5}  {'kind':<6}  {'deadlines':<14} {'steps':>5}  {'p50':>8}  {'max':>8}  "
        f"{'start':>6}  {'false':>5}  {'genuine':>7}  configuration; faults"
    )
    for r in rows:
        start = "-" if r["start_s"] is None else f"{r['start_s']:.1f}s"
        deadlines = ",".join(f"{d:g}s" for d in dict.fromkeys(r.get("deadlines") or [r["deadline_s"]]))
        extra = (" (restart)" if r.get("restart") else "") + (f"; {r['guard']}" if r.get("guard") else "")
        if r.get("guard_events"):
            extra += f"; guard decisions: {guard_tally(r['guard_events'])}"
        tr.write_line(
            f"{r['batch_size']:>5}  {r.get('kind', 'engine'):<6}  {deadlines:<14} {r['steps']:>5}  "
            f"{_fmt_s(r['step_p50_s']):>8}  {_fmt_s(r['step_max_s']):>8}  {start:>6}  "
            f"{r['false_deaths']:>5}  {r['genuine_deaths']:>7}  {r['label']}{extra}; faults: {r['injection']}"
        )
    restarts = sum(1 for r in rows if r.get("restart"))
    tr.write_line(
        f"engines started: {len(rows)}; restarts after a death: {restarts}; "
        f"false deaths: {false}; genuine deaths: {genuine}; policy: {policy_name}"
    )
    for line in time_lines(time_breakdown(results)):
        tr.write_line(line)
    for worker in results.lost_workers:
        tr.write_line(f"enginedead: no results from xdist worker {worker} (it crashed)", red=True)


def report_json(results: Results, settings: RunFacts) -> str:
    """The JSON report's text, with the fingerprint of the machine its step times hold for."""
    return dumps(build(results, settings, this_machine()))


def write(out: Output | str, data: dict[str, Any]) -> None:
    """Through the one writer (``outputs``): a file whole or not at all, a device in place."""
    target = out if isinstance(out, Output) else claim(out, repr(out))
    target.write_text(dumps(data))
