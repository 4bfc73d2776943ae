"""Probe conformance (``enginedead probe-settings``): what the probes operators deploy make of a
SLOW and a HUNG engine, with the guard off and on.

For each state × guard one real API server is started, the engine is made SLOW
(64 clients, every step busy past a 2 s deadline) or HUNG (its worker idles inside
step 2 under a 30 s deadline), and every ``SAMPLE_S`` each probe kind is sent with
a long timeout: ``GET /health``, ``GET /v1/models``, a 1-token completion, and
``enginedead probe``.  A probe *setting* (period, timeout, failure threshold: the
Kubernetes fields) is then replayed over those samples, as a kubelet would have
sent it from the moment the state began: when would it have restarted the server?
During SLOW any restart is a false kill; during HUNG, the sooner the better.

The replay is pure (``replay``) and unit-tested; the measurement needs real servers.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...contract.control import Injection
from ...contract.decisions import Verdict
from ...logic.planning.engines import DeadlineAndFaults, EngineSpec, GuardSpec
from ...logic.reporting.probereplay import PROBES, SAMPLE_S, SAMPLE_TIMEOUT_S, STATES, Conditions, Run, Sample
from ..engines.reaper import Reaper
from ..waiting import wait_until
from . import probe

if TYPE_CHECKING:
    from ..engines.server import Server
    from ..waiting import Progress

SLOW_DEADLINE_S = 2.0

SLOW_S_PER_SEQ = 0.05

SLOW_CLIENTS = 64

HUNG_DEADLINE_S = 30.0

DEFAULT_HANG_S = 10.0

DEFAULT_WINDOW_S = 60.0


def conditions(window_s: float, hang_s: float) -> Conditions:
    """What ``run_trials(model, window_s, hang_s)`` makes its states with."""
    return Conditions(window_s, SAMPLE_S, SLOW_DEADLINE_S, SLOW_CLIENTS, SLOW_S_PER_SEQ, HUNG_DEADLINE_S,
                      hang_s)


def _http(port: int, method: str, path: str, body: dict[str, Any] | None) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=SAMPLE_TIMEOUT_S)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status == 200
    finally:
        conn.close()


def _probe_fn(kind: str, port: int, model: str) -> Callable[[], bool]:
    if kind == "GET /health":
        return lambda: _http(port, "GET", "/health", None)
    if kind == "GET /v1/models":
        return lambda: _http(port, "GET", "/v1/models", None)
    if kind == "1-token completion":
        return lambda: _http(port, "POST", "/v1/completions",
                             {"model": model, "prompt": "the", "max_tokens": 1})
    return lambda: probe.probe(port=port).alive


def _sample(fn: Callable[[], bool], out: list[Sample], lock: threading.Lock) -> None:
    t = time.monotonic()
    try:
        ok = fn()
        latency: float | None = time.monotonic() - t
    except (OSError, http.client.HTTPException):
        ok, latency = False, None
        if time.monotonic() - t < SAMPLE_TIMEOUT_S:
            latency = time.monotonic() - t  # refused or reset: an answer, a failing one
    with lock:
        out.append(Sample(t, latency, ok))


def run_trial(state: Verdict, guarded: bool, model: str, window_s: float, hang_s: float,
            progress: Progress | None = None) -> Run:
    """Start one server, put its engine in ``state``, sample every probe for ``window_s``."""
    from ..engines.server import Server

    slow = state is Verdict.SLOW
    guard = GuardSpec(hang_s, "reference", "enginedead probe-settings") if guarded else None
    spec = EngineSpec(model, SLOW_CLIENTS if slow else 8, guard=guard, server=True)
    faults = Injection(slow_s_per_seq=SLOW_S_PER_SEQ) if slow else Injection(hang_at_step=2)
    deadline = SLOW_DEADLINE_S if slow else HUNG_DEADLINE_S
    run = Run(state, guarded, window_s)
    lock = threading.Lock()
    first = DeadlineAndFaults(deadline, "enginedead probe-settings", faults)
    with Reaper() as reaper, Server(spec, reaper).start(first, progress) as server:
        server.hurry = True  # the trial ends it: no graceful shutdown to wait for
        run.samples = {kind: [] for kind in PROBES}
        clients = _start_clients(server.port, server.served_name, slow, window_s)
        run.t0 = time.monotonic()
        if progress:
            progress(f"{state}, guard {'on' if guarded else 'off'}: {clients} clients, probing for "
                     f"{window_s:g} s")
        died_at = _probe_for_window(server, run, slow, lock)
        if died_at is not None:
            run.died_after_s = round(died_at - run.t0, 2)
        time.sleep(min(SAMPLE_TIMEOUT_S, 2.0))
    with lock:
        run.samples = {k: list(v) for k, v in run.samples.items()}
    return run


def _start_clients(port: int, name: str, slow: bool, window_s: float) -> int:
    """The load that makes the state: for SLOW, 64 clients whose completions outlast the
    window; for HUNG, 8 short ones (the hang holds them).  Returns how many were started."""
    from ..engines.server import PROMPT_WORDS

    steps_each = math.ceil(window_s / (SLOW_S_PER_SEQ * SLOW_CLIENTS)) + 2
    clients = SLOW_CLIENTS if slow else 8
    prompt = " ".join(PROMPT_WORDS[:4])
    body = {"model": name, "prompt": prompt, "max_tokens": steps_each if slow else 4,
            "ignore_eos": True, "temperature": 0.0}

    def client() -> None:
        with contextlib.suppress(OSError, http.client.HTTPException):
            _http(port, "POST", "/v1/completions", body)

    for _ in range(clients):
        threading.Thread(target=client, daemon=True).start()
    return clients


def _probe_for_window(server: Server, run: Run, slow: bool, lock: threading.Lock) -> float | None:
    """Every ``SAMPLE_S`` from ``run.t0`` for ``run.window_s``: send each probe kind (into
    ``run.samples``), and watch for the engine's death.  Returns when it died, if it did."""
    fns = {kind: _probe_fn(kind, server.port, server.served_name) for kind in PROBES}
    died: list[float] = []

    def sample() -> None:
        for kind in PROBES:
            threading.Thread(target=_sample, args=(fns[kind], run.samples[kind], lock),
                             daemon=True).start()
        if not died and not server.engine_core_alive():
            died.append(time.monotonic())
        if not slow and not run.note:
            _start_at_the_hang(server, run)  # the window moves with run.t0

    wait_until(lambda: time.monotonic() >= run.t0 + run.window_s, math.inf, every_s=SAMPLE_S,
               meanwhile=sample)
    return died[0] if died else None


def _start_at_the_hang(server: Server, run: Run) -> None:
    """The HUNG state begins when the worker enters its hung step: once it has, move
    ``run.t0`` there (the window with it) and note it."""
    stuck = [st for st in server.evidence.steps() if st.running]
    if stuck:
        run.note = f"the hang began {stuck[0].started - run.t0:.2f} s after the clients"
        run.t0 = stuck[0].started


def run_trials(model: str, window_s: float = DEFAULT_WINDOW_S, hang_s: float = DEFAULT_HANG_S,
                progress: Progress | None = None,
                cases: Sequence[tuple[Verdict, bool]] | None = None) -> list[Run]:
    """Every state × guard (or ``cases``), one server each, one after the other."""
    cases = cases or [(state, guarded) for state in STATES for guarded in (False, True)]
    return [run_trial(state, guarded, model, window_s, hang_s, progress) for state, guarded in cases]
