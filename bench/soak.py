"""The guard proven under traffic: vLLM's own server, real clients, scheduled faults, every decision judged.

    python bench/soak.py [--minutes N] [--schedule FILE] [--model M] [--runs LIST]
                         [--restarts N] [--guidellm PATH] [--json PATH]      (make soak: 20 minutes)
                         [--scrape-s S] [--shot PNG]

Runs, one server at a time, each under a restart-on-exit supervisor (as systemd or
Kubernetes runs a server) with the same clients and fault schedule:

guarded  ``ENGINEDEAD_GUARD=1`` on the model (default the bundled tiny-llama), the default
         schedule repeated for --minutes
stock    the same model and schedule without the guard, one pass: what stock vLLM loses
gemma    the guard on the bundled shrunk Gemma-4 MoE (gemma-4-moe-mini), one pass
tp2      the guard at --tensor-parallel-size 2 (schedules/tp2.toml: one rank slow, one hung)
cost     the guard's per-step cost, guard on ÷ off, side by side (bench/run.py's guard bench)

With ``prometheus`` on PATH (Debian's package), each run has a real Prometheus of its own scraping
the server's /metrics on 127.0.0.1 every --scrape-s (its data in a temporary directory, stopped by
its pid); after the run, what it recorded is held against what the soak counted (the step
histogram's count against the steps run, the guard's decisions, deaths, restarts).  --shot takes a
picture of its graph page over the first guarded run (headless Chromium).

Prints progress while it runs and one table at the end; --json writes every run's record.
Exit 0 when every guarded run met its targets (0 lost to false deaths, 0 false ends,
0 missed hangs, engine-core RSS drift <= 5 %, nothing leaked, cost <= 1 %), 1 when one
did not, 2 on bad usage (a bad schedule is one line naming the entry).  Ctrl-C stops
everything within seconds.  Load goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_enginedead.harness.engines.coreready import EngineStartError
from pytest_enginedead.harness.engines.reaper import Reaper
from pytest_enginedead.harness.load.guidellm import find_guidellm
from pytest_enginedead.harness.load.soak import soak
from pytest_enginedead.harness.load.soakfaults import Plan
from pytest_enginedead.harness.load.soakprom import Watch
from pytest_enginedead.harness.probing.promserver import MISSING, PrometheusError, prometheus, screenshot
from pytest_enginedead.logic import machine as fingerprint
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL, presets
from pytest_enginedead.logic.soak.schedule import ScheduleError, load

HERE = Path(__file__).resolve().parent
SCHEDULES = HERE / "schedules"
RUNS = ("guarded", "stock", "gemma", "tp2", "cost")
GEMMA = "gemma-4-moe-mini"
#: the targets each guarded run is held to
DRIFT_PCT = 5.0
COST_RATIO = 1.01


def say(message: str, done: bool = False) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def model_dir(name: str) -> str:
    found = presets().get(name)
    if found:
        return found
    if (Path(name) / "config.json").is_file():
        return str(Path(name).resolve())
    raise ScheduleError(f"--model {name!r}: neither a bundled preset ({', '.join(presets())}) nor a "
                        "directory with a config.json")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/soak.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=3.0,
                   help="how long the guarded run drives traffic (the schedule repeats); default 3")
    p.add_argument("--schedule", default=str(SCHEDULES / "default.toml"),
                   help="fault schedule (TOML or JSON)")
    p.add_argument("--tp-schedule", default=str(SCHEDULES / "tp2.toml"), help="the tp2 run's schedule")
    p.add_argument("--model", default=BUNDLED_MODEL, help="model preset or directory (default tiny-llama)")
    p.add_argument("--runs", default=",".join(RUNS), help=f"which runs, comma list of {', '.join(RUNS)}")
    p.add_argument("--restarts", type=int, default=None,
                   help="the supervisor's restart budget per run (default: no limit)")
    p.add_argument("--guidellm", default=None, help="guidellm executable (default $GUIDELLM, else on PATH)")
    p.add_argument("--json", default=None, help="write every run's record here")
    p.add_argument("--scrape-s", type=float, default=1.0, help="Prometheus' scrape interval; default 1")
    p.add_argument("--shot", default=None,
                   help="a PNG of Prometheus' graph page over the first guarded run (needs chromium)")
    args = p.parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    bad = [r for r in runs if r not in RUNS]
    if bad or not runs:
        p.error(f"--runs {args.runs!r}: {bad[0] if bad else 'none'} is not one of {', '.join(RUNS)}")
    if not 0 < args.minutes <= 24 * 60:
        p.error(f"--minutes {args.minutes:g}: must be above 0 and at most a day")
    if not 0.1 <= args.scrape_s <= 60:
        p.error(f"--scrape-s {args.scrape_s:g}: must be 0.1 to 60")
    if args.restarts is not None and args.restarts < 0:
        p.error(f"--restarts {args.restarts}: must be 0 or more")
    args.runs = runs
    return args


def plans(args: argparse.Namespace, guidellm: str | None) -> list[Plan]:
    schedule = load(args.schedule)
    model = model_dir(args.model)
    out = []
    for run in args.runs:
        if run == "guarded":
            out.append(Plan("guarded", model, schedule, True, args.minutes, args.restarts, guidellm))
        elif run == "stock":
            out.append(Plan("stock", model, schedule, False, None, args.restarts, guidellm))
        elif run == "gemma":
            out.append(Plan("gemma guarded", model_dir(GEMMA), schedule, True, None, args.restarts, guidellm))
        elif run == "tp2":
            tp2 = load(args.tp_schedule)
            out.append(Plan("tp2 guarded", model, tp2, True, None, args.restarts, guidellm))
    return out


def guard_cost(rounds: int = 6, n: int = 64, tokens: int = 64) -> dict[str, Any]:
    """bench/run.py's guard bench, shortened: one pair of each start order and a control pair."""
    sys.path.insert(0, str(HERE))
    import run as bench_run

    pairs = bench_run._paired("guard", "rec", rounds, n, tokens, repeats=1)
    summary = bench_run._summary(pairs, "guard", "rec")
    return {"ratio": round(summary["ratio"], 4), "control_ratio": round(summary["control_ratio"], 4),
            "pair_ratios": [round(r, 4) for r in summary["pair_ratios"]],
            "median_step_on_ms": round(summary["median_on_s"] * 1000, 2),
            "median_step_off_ms": round(summary["median_off_s"] * 1000, 2), "batch": n,
            "target": f"<= {COST_RATIO}"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _num(value: Any) -> str:
    return "-" if value is None else str(value)


def table(records: list[dict[str, Any]]) -> list[str]:
    head = ("run", "guard", "min", "steps", "sent", "served", "failed", "lost to false death",
            "false ends", "missed hangs", "restarts", "died with", "RSS core", "RSS workers",
            "leaked p/shm/fd")
    rows = [head]
    for r in records:
        drift = r["rss_drift_pct"]
        leaked = r["leaked"]
        exits = ",".join(str(c) for c in r["server_exits"]) or "none"
        reqs = r["requests"]
        rows.append((r["name"], "on" if r["guard"] else "off", f"{r['minutes']:.1f}", str(r["steps"]),
                     str(reqs["sent"]), str(reqs["completed"]), str(reqs["failed"]),
                     str(r["lost_to_false_death"]), _num(r["false_ends"]), _num(r["missed_hangs"]),
                     str(r["restarts"]), exits if len(exits) <= 24 else exits[:21] + "...",
                     _pct(drift["engine_core"]), _pct(drift["workers"]),
                     f"{leaked['processes']}/{leaked['shm']}/{leaked['fds']}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return lines


def misses(records: list[dict[str, Any]], cost: dict[str, Any] | None) -> list[str]:
    """Each target a guarded run (or the cost) missed, in one line."""
    out = []
    for r in records:
        if not r["guard"]:
            continue
        name = r["name"]
        for key in ("lost_to_false_death", "false_ends", "missed_hangs"):
            if r[key]:
                out.append(f"{name}: {key} = {r[key]}")
        core = r["rss_drift_pct"]["engine_core"]
        if core is not None and core > DRIFT_PCT:
            out.append(f"{name}: engine-core RSS drift {core:+.1f}% > {DRIFT_PCT:g}%")
        for key in ("processes", "shm", "fds"):
            if r["leaked"][key]:
                out.append(f"{name}: leaked {key}: {r['leaked']['what'][key]}")
        out += [f"{name}: Prometheus {line}" for line in prometheus_disagrees(r.get("prometheus"))]
    if cost is not None and cost["ratio"] > COST_RATIO:
        out.append(f"guard cost: on ÷ off {cost['ratio']:.3f} > {COST_RATIO}")
    return out


def prometheus_disagrees(seen: dict[str, Any] | None) -> list[str]:
    """What Prometheus saw that the soak's count does not allow (nothing without Prometheus)."""
    if not seen:
        return []
    if "error" in seen:
        return [f"could not be asked: {seen['error']}"]
    return [f"saw {t['prometheus']} {t['what']}, the soak counted {t['soak']} "
            f"({_range(t)} by its last scrape)" for t in seen["tallies"] if not t["agree"]]


def _range(tally: dict[str, Any]) -> str:
    low, high = tally["by_last_scrape"]
    return str(low) if low == high else f"{low}-{high}"


def prometheus_lines(records: list[dict[str, Any]]) -> list[str]:
    """What Prometheus saw of each run against what the soak counted, a line per run."""
    out = []
    for r in records:
        seen = r.get("prometheus")
        if not seen or "error" in seen:
            continue
        parts = [f"{t['what']} {t['prometheus']}/{t['soak']}{'' if t['agree'] else ' DISAGREE'}"
                 for t in seen["tallies"]]
        out.append(f"[{r['name']}] Prometheus saw / the soak counted: {'; '.join(parts)}")
    return out


def stock_line(records: list[dict[str, Any]]) -> str | None:
    stock = next((r for r in records if not r["guard"]), None)
    guarded = next((r for r in records if r["guard"] and r["tensor_parallel_size"] == 1), None)
    if stock is None:
        return None
    first = next((d for d in stock["deaths"] if d["window"] and " slow" in d["window"]), None)
    if first is None:
        return f"stock: no death at a slow window ({stock['requests']['failed']} requests failed)"
    line = (f"stock vLLM at its first slow window: the engine died, the server exited {first['exit']}, "
            f"{first['requests_lost']} requests lost (down {first['down_s']} s until the supervisor "
            "restarted it); "
            f"in all {stock['lost_to_false_death']} lost to false deaths and {stock['restarts']} restarts")
    if guarded is not None:
        line += (f"; guarded: {guarded['lost_to_false_death']} lost to false deaths, "
                 f"{guarded['restarts']} restarts (each a scheduled hang or kill)")
    return line


@contextlib.contextmanager
def watching(scrape_s: float) -> Iterator[Watch | None]:
    """A Prometheus of its own for one run (None where ``prometheus`` is not on PATH), its data in a
    temporary directory removed after."""
    if shutil.which("prometheus") is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="enginedead-soak-prometheus-") as tmp, \
            prometheus(Path(tmp), interval_s=scrape_s) as prom:
        yield Watch(prom, scrape_s)


#: the picture's graphs: the step in flight against vLLM's deadline and the guard's hang_s, and the
#: guard's decisions counted (carried across restarts: the server keeps its port and state directory)
#: (one selector by name: ``or`` would drop hang_s, whose labels are the deadline's)
SHOT_GRAPHS = ('{__name__=~"enginedead_step_age_seconds|enginedead_stock_deadline_seconds|'
               'enginedead_guard_hang_seconds"}',
               "sum by (action, verdict) (enginedead_guard_decisions_total) > 0")


def shoot(watch: Watch, path: str, minutes: float) -> None:
    """The picture of Prometheus' graph page over the run just done (one line where it fails)."""
    try:
        screenshot(watch.prom, path, range_s=max(60, round(minutes * 60) + 30), graphs=SHOT_GRAPHS,
                   height=1800)
        say(f"Prometheus' graph page: {path}")
    except (OSError, PrometheusError, RuntimeError) as exc:
        say(f"no picture of Prometheus' graph page: {exc}")


def run_all(
    todo: list[Plan], args: argparse.Namespace, reaper: Reaper
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Each plan's soak, one at a time (its record), then the guard's cost when ``cost`` is asked."""
    records: list[dict[str, Any]] = []
    shot = args.shot
    for plan in todo:
        say(f"[{plan.name}] starting: {plan.schedule.describe()}"
            f"{f', {plan.minutes:g} min' if plan.minutes else ', one pass'}")
        with watching(args.scrape_s) as watch:
            records.append(soak(plan, say, reaper, watch))
            if watch is not None and shot and plan.guard:
                shoot(watch, shot, records[-1]["minutes"])
                shot = None
        say(f"[{plan.name}] done: {json.dumps({k: records[-1][k] for k in ('requests', 'false_ends')})}")
    cost = None
    if "cost" in args.runs:
        say("[cost] guard on ÷ off, side by side (two engines per pair)")
        cost = guard_cost()
    for r in records:
        r["guard_cost_ratio"] = cost["ratio"] if cost and r["guard"] else None
    return records, cost


def report(records: list[dict[str, Any]], cost: dict[str, Any] | None) -> list[str]:
    """Print the table, stock vLLM's line, the guard's cost and each target missed; the misses."""
    print()
    for line in table(records):
        print(line)
    for line in [*filter(None, [stock_line(records)]), *prometheus_lines(records)]:
        print(line)
    if cost:
        print(f"guard cost per step, on ÷ off: {cost['ratio']:.3f} (pairs {cost['pair_ratios']}; "
              f"identical engines differ by {cost['control_ratio']:.3f})")
    missed = misses(records, cost)
    for line in missed:
        print(f"MISSED: {line}")
    return missed


def write_json(path: str, began: float, argv: list[str], records: list[dict[str, Any]],
               cost: dict[str, Any] | None, missed: list[str]) -> None:
    """Every run's record, the guard's cost and the targets missed, with when and where, to ``path``."""
    data = {"measured": time.strftime("%Y-%m-%d %H:%M", time.localtime(began)),
            "wall_minutes": round((time.time() - began) / 60, 1), "argv": argv,
            "machine": fingerprint.this_machine(), "runs": records, "guard_cost": cost,
            "targets_missed": missed}
    Path(path).write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"written: {path}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    guidellm = find_guidellm(args.guidellm)
    try:
        todo = plans(args, guidellm)
    except ScheduleError as exc:
        print(f"bench/soak.py: {exc}", file=sys.stderr)
        return 2
    say(f"soak: runs {', '.join(args.runs)}; schedule {todo[0].schedule.describe() if todo else '-'}; "
        f"guidellm {'at ' + guidellm if guidellm else 'not installed (pip install guidellm, or --guidellm)'}")
    if shutil.which("prometheus") is None:
        say(f"the soak runs without Prometheus: {MISSING}")
    reaper = Reaper()
    began = time.time()
    try:
        records, cost = run_all(todo, args, reaper)
    except KeyboardInterrupt:
        say("interrupted: everything stopped")
        return 130
    except EngineStartError as exc:
        say(f"soak: {str(exc).splitlines()[0]}")
        return 1
    finally:
        reaper.close()
    missed = report(records, cost)
    if args.json:
        write_json(args.json, began, argv, records, cost, missed)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
