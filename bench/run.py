"""Benchmarks: what the harness costs and how fast it answers, measured side by side.

    python bench/run.py [start] [step] [verdict] [suite] [xdist]     (default: all)

Each benchmark runs its variants alternately in one run (this machine is shared
and noisy) and prints ratios of medians.  Results go to bench/results.json.

start    engine start through the harness vs a bare ``LLM(...)`` with the same
         arguments, each in a fresh process (import excluded)           ratio <= 1.05
step     decode step time with the worker's step record and the liveness
         sampler on vs off (same engine arguments, 64 sequences), each
         order of engine start, plus an off-vs-off control              ratio <= 1.02
verdict  time from EngineDeadError reaching the test to the verdict      <= 0.5 s
suite    engines started vs distinct engine configurations for the
         downstream suites the project's tests run; cold time to
         reproduce the false death (fresh pytest, engine start included)
xdist    the same downstream suite with -n 0 and -n 2 --dist loadgroup:
         wall time and engines started
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
RESULTS = HERE / "results.json"
#: the downstream suites (shared with the project's tests)
EXAMPLES = ROOT / "tests" / "examples"
# scripts and downstream projects the benchmarks write; removed when the run ends
SCRATCH = tempfile.TemporaryDirectory(prefix="enginedead-bench-")

# --- start: harness vs bare ----------------------------------------------------------

START_ONE = textwrap.dedent(
    """
    import json, os, sys, time
    if __name__ == "__main__":
        mode = sys.argv[1]
        from vllm import LLM  # import is not what we measure
        from pytest_enginedead import compat
        from pytest_enginedead.engine import Engine
        from pytest_enginedead.options import BUNDLED_MODEL
        from pytest_enginedead.planning import EngineSpec
        spec = EngineSpec(BUNDLED_MODEL, 8, 300.0, "bench")
        if mode == "harness":
            engine = Engine(spec)
            t0 = time.monotonic(); engine.start(); dt = time.monotonic() - t0
            engine.stop()
        else:
            os.environ.update(compat.engine_environment())
            os.environ[compat.DEADLINE_ENV] = "300"
            kwargs = compat.llm_kwargs(BUNDLED_MODEL, 8)
            t0 = time.monotonic(); llm = LLM(**kwargs); dt = time.monotonic() - t0
            compat.shutdown_llm(llm)
        print(json.dumps({"mode": mode, "start_s": dt}))
    """
)


def bench_start(rounds: int = 3) -> dict[str, Any]:
    script = Path(tempfile.mkdtemp(dir=SCRATCH.name)) / "start_one.py"
    script.write_text(START_ONE)
    times: dict[str, list[float]] = {"harness": [], "bare": []}
    for i in range(rounds):
        order = ("harness", "bare") if i % 2 == 0 else ("bare", "harness")
        for mode in order:
            out = subprocess.run([PY, str(script), mode], capture_output=True, text=True, timeout=600)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            if not line:
                raise RuntimeError(f"{mode} start failed:\n{out.stderr[-3000:]}")
            times[mode].append(json.loads(line[-1])["start_s"])
            print(f"  start {mode:8s} {times[mode][-1]:.2f} s", flush=True)
    h, b = statistics.median(times["harness"]), statistics.median(times["bare"])
    return {"harness_s": times["harness"], "bare_s": times["bare"], "median_harness_s": h,
            "median_bare_s": b, "ratio": h / b, "target": "<= 1.05"}


# --- step: record + sampler on vs off ------------------------------------------------

STEP = textwrap.dedent(
    """
    import json, os, statistics, sys, time
    if __name__ == "__main__":
        rounds, n, tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
        modes = sys.argv[4].split(",")  # start order, e.g. "on,off"; "rec" = record without sampler
        from pytest_enginedead import assert_no_false_death, record
        from pytest_enginedead.engine import Engine
        from pytest_enginedead.options import BUNDLED_MODEL
        from pytest_enginedead.planning import EngineSpec

        class Bare(Engine):
            # the same engine with the vllm.general_plugins entry left inert
            def start(self, progress=None):
                saved = record.ENV_DIR
                record.ENV_DIR = "ENGINEDEAD_BENCH_OFF"  # the harness sets a name the plugin ignores
                try:
                    return super().start(progress)
                finally:
                    record.ENV_DIR = saved

        engines = [(Bare if mode == "off" else Engine)(EngineSpec(BUNDLED_MODEL, n, 300.0, f"bench {i}"))
                   .start() for i, mode in enumerate(modes)]
        times = [[] for _ in engines]
        try:
            for engine in engines:
                engine.generate(n, max_tokens=4)  # warm-up
            for r in range(rounds):
                for i in (range(len(engines)) if r % 2 == 0 else reversed(range(len(engines)))):
                    engine = engines[i]
                    t0 = time.monotonic()
                    if modes[i] == "on":
                        with assert_no_false_death(engine):  # the sampler runs meanwhile
                            engine.generate(n, max_tokens=tokens)
                    else:
                        engine.generate(n, max_tokens=tokens)
                    times[i].append((time.monotonic() - t0) / tokens)
            recorded = [len(engine.steps()) for engine in engines]
        finally:
            for engine in engines:
                engine.stop()
        print(json.dumps({"modes": modes, "times": times, "recorded": recorded}))
    """
)


def _step_pair(modes: str, rounds: int, n: int, tokens: int) -> dict[str, Any]:
    """Two engines side by side in one fresh process, started in the order of ``modes``."""
    script = Path(tempfile.mkdtemp(dir=SCRATCH.name)) / "step.py"
    script.write_text(STEP)
    out = subprocess.run([PY, str(script), str(rounds), str(n), str(tokens), modes],
                         capture_output=True, text=True, timeout=1200)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not line:
        raise RuntimeError(f"step bench failed:\n{out.stderr[-3000:]}")
    data = json.loads(line[-1])
    data["medians_s"] = [statistics.median(t) for t in data["times"]]
    return data


def step_record_cost(steps: int = 100_000) -> float:
    """Seconds the worker's wrapper and its four record writes add to one step, measured
    directly on a no-op step (the side-by-side ratio cannot resolve below ~1 %)."""
    from pytest_enginedead import worker

    class Fake:
        def execute_model(self, scheduler_output: Any) -> None:
            return None

    class Inner:
        def sample_tokens(self, *args: Any) -> None:
            return None

    saved = worker._recorder
    run_dir = tempfile.mkdtemp(dir=SCRATCH.name)
    recorder = worker._recorder = worker.StepRecorder(run_dir)
    try:
        Fake.execute_model = worker.wrap_execute_model(Fake.execute_model)  # type: ignore[method-assign]
        Fake.sample_tokens = worker.wrap_sample_tokens("sample_tokens", None)  # type: ignore[attr-defined]
        fake = Fake()
        fake.worker = Inner()  # type: ignore[attr-defined]
        output = types.SimpleNamespace(num_scheduled_tokens={i: 1 for i in range(64)})
        t0 = time.perf_counter()
        for _ in range(steps):
            fake.execute_model(output)
            fake.sample_tokens(None)  # type: ignore[attr-defined]
        return (time.perf_counter() - t0) / steps
    finally:
        worker._recorder = saved
        recorder.close()


def bench_step(rounds: int = 12, n: int = 64, tokens: int = 192, repeats: int = 2) -> dict[str, Any]:
    """On vs off, each order of engine start ``repeats`` times, plus an off-vs-off control.

    Two engine instances differ by themselves by a percent or two (start order, memory
    placement); alternating which one starts first and taking the geometric mean cancels
    start order, and the control shows how far two identical engines differ.
    """
    pairs: list[dict[str, Any]] = []
    for modes in ("on,off", "off,on") * repeats + ("off,off",):
        data = _step_pair(modes, rounds, n, tokens)
        first, second = data["medians_s"]
        ratio = (first / second) if modes == "on,off" else (second / first)
        pairs.append({**data, "ratio": ratio})
        label = ("control off/off (2nd / 1st)" if modes == "off,off"
                 else f"on/off, {modes.split(',')[0]} started first")
        print(f"  {label}: {first * 1000:.2f} vs {second * 1000:.2f} ms per step -> {ratio:.3f}", flush=True)
        assert modes == "off,off" or max(data["recorded"]) > 0, "the record must be on"
    measured = [p for p in pairs if p["modes"] != ["off", "off"]]
    on_off = statistics.geometric_mean(p["ratio"] for p in measured)
    control = pairs[-1]["ratio"]
    on_s = [p["medians_s"][p["modes"].index("on")] for p in measured]
    off_s = [p["medians_s"][p["modes"].index("off")] for p in measured]
    direct = step_record_cost()
    print(f"  directly: wrapper + 4 record writes = {direct * 1e6:.1f} us per step "
          f"({direct / statistics.median(off_s) * 100:.2f} % of a step)", flush=True)
    print(f"  on/off over {len(measured)} pairs, start order cancelled: {on_off:.3f} "
          f"(pairs {min(p['ratio'] for p in measured):.3f}-{max(p['ratio'] for p in measured):.3f}); "
          f"identical engines differ by {control:.3f}", flush=True)
    return {"batch": n, "pairs": pairs, "ratio": on_off, "control_ratio": control,
            "median_on_s": statistics.median(on_s), "median_off_s": statistics.median(off_s),
            "direct_record_s_per_step": direct, "target": "<= 1.02"}


# --- downstream suites ------------------------------------------------------------------

def downstream(example: str, *args: str) -> tuple[float, dict[str, Any], int]:
    """Run the downstream suite ``tests/examples/<example>`` under ``pytest -p enginedead`` in a
    fresh process: wall, report, exit code."""
    work = Path(tempfile.mkdtemp(dir=SCRATCH.name))
    shutil.copytree(EXAMPLES / example, work, dirs_exist_ok=True)
    report = work / "report.json"
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    t0 = time.monotonic()
    done = subprocess.run(
        [PY, "-m", "pytest", "-p", "enginedead", "-p", "timeout", "-p", "xdist", "-p", "no:cacheprovider",
         "-q", f"--enginedead-report={report}", *args],
        cwd=work, env=env, capture_output=True, text=True, timeout=1800,
    )
    wall = time.monotonic() - t0
    if not report.exists():
        raise RuntimeError(f"no report:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return wall, json.loads(report.read_text()), done.returncode


def bench_verdict(rounds: int = 3) -> dict[str, Any]:
    """Real false deaths: verdict time from each death record; cold time from the first."""
    walls, verdicts = [], []
    for _ in range(rounds):
        wall, data, _ = downstream("false_death")
        death = next(t for t in data["tests"] if t["verdict"] == "SLOW")["deaths"][0]
        walls.append(wall)
        verdicts.append(death["verdict_s"])
        print(f"  verdict {death['verdict_s'] * 1000:.0f} ms; cold reproduction {wall:.1f} s", flush=True)
    return {"verdict_s": verdicts, "max_verdict_s": max(verdicts), "target": "<= 0.5 s",
            "cold_reproduction_s": walls, "median_cold_reproduction_s": statistics.median(walls)}


#: the downstream suites the project's own engine tests run (tests/examples/)
SUITES = ("stock_vs_policy", "genuine_deaths", "xdist_suite")


def bench_suite() -> dict[str, Any]:
    out = {}
    for name in SUITES:
        wall, data, _ = downstream(name)
        out[name] = {"engines_started": data["engines_started"], "configurations": data["configurations"],
                     "wall_s": wall}
        print(f"  {name}: {data['engines_started']} engines for {data['configurations']} configurations"
              f" ({wall:.0f} s)", flush=True)
    return out


def bench_xdist(rounds: int = 1) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"n0": [], "n2": []}
    for i in range(rounds):
        for mode in (("n0", "n2") if i % 2 == 0 else ("n2", "n0")):
            args = ("-n", "0") if mode == "n0" else ("-n", "2", "--dist", "loadgroup")
            wall, data, code = downstream("xdist_suite", *args)
            outcomes = sorted((t["nodeid"], t["outcome"]) for t in data["tests"] if t["when"] == "call")
            runs[mode].append({"wall_s": wall, "engines_started": data["engines_started"],
                               "configurations": data["configurations"], "outcomes": outcomes, "exit": code})
            print(f"  {mode}: {wall:.1f} s, {data['engines_started']} engines", flush=True)
    n0 = statistics.median(r["wall_s"] for r in runs["n0"])
    n2 = statistics.median(r["wall_s"] for r in runs["n2"])
    same = all(r["outcomes"] == runs["n0"][0]["outcomes"] for r in runs["n0"] + runs["n2"])
    return {"runs": runs, "median_n0_s": n0, "median_n2_s": n2, "speedup": n0 / n2, "same_outcomes": same}


BENCHES = {"start": bench_start, "step": bench_step, "verdict": bench_verdict,
           "suite": bench_suite, "xdist": bench_xdist}


def main(argv: list[str]) -> int:
    chosen = argv or list(BENCHES)
    unknown = [c for c in chosen if c not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {list(BENCHES)}", file=sys.stderr)
        return 2
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in chosen:
        print(f"{name}:", flush=True)
        results[name] = BENCHES[name]()
        results[name]["measured"] = time.strftime("%Y-%m-%d %H:%M")
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if not isinstance(vv, (list, dict))}
                      for k, v in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
