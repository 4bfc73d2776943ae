"""Probe conformance (``enginedead probes``): what the probes operators deploy make of a
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
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..commands import probe as probe_mod
from ..contract.control import Injection
from ..logic.planning import EngineSpec, GuardSpec, Instructions
from .cleanup import Reaper

if TYPE_CHECKING:
    from .engine import Progress

#: how often each probe kind is sent while a state lasts
SAMPLE_S = 0.5
#: the longest a sampled probe may take (above every setting's timeout)
SAMPLE_TIMEOUT_S = 20.0
SLOW_DEADLINE_S = 2.0
SLOW_S_PER_SEQ = 0.05
SLOW_CLIENTS = 64
HUNG_DEADLINE_S = 30.0
DEFAULT_HANG_S = 10.0
DEFAULT_WINDOW_S = 60.0

PROBES = ("GET /health", "GET /v1/models", "1-token completion", "enginedead probe")
STATES = ("SLOW", "HUNG")


@dataclass(frozen=True)
class Setting:
    """One probe configuration as deployed: Kubernetes' fields, and where it comes from."""

    name: str
    period_s: float
    timeout_s: float
    failure_threshold: int
    source: str

    def describe(self) -> str:
        return f"{self.name} ({self.period_s:g}s/{self.timeout_s:g}s/x{self.failure_threshold})"


SETTINGS = (
    Setting("kubernetes defaults", 10, 1, 3,
            "Kubernetes probe defaults (periodSeconds 10, timeoutSeconds 1, failureThreshold 3); "
            "vLLM's own Kubernetes guide sets only initialDelaySeconds on its /health probe"),
    Setting("benchmark deployment", 10, 15, 10,
            "a public vLLM benchmark deployment that raised its probe to timeoutSeconds 15, "
            "failureThreshold 10 after saturated servers were restarted (issue 20)"),
    Setting("compose healthcheck", 30, 10, 3,
            "a published vLLM Docker Compose healthcheck (interval 30s, timeout 10s, retries 3)"),
    Setting("tight exec probe", 2, 1, 2,
            "what the enginedead probe allows: it answers in well under 1 s and never queues"),
)


def parse_setting(raw: str) -> Setting:
    """``NAME=PERIOD/TIMEOUT/THRESHOLD`` (seconds, seconds, a whole number), e.g. ``mine=5/2/3``."""
    name, sep, rest = raw.partition("=")
    parts = rest.split("/")
    if not sep or not name.strip() or len(parts) != 3:
        raise ValueError(f"{raw!r} is not NAME=PERIOD/TIMEOUT/THRESHOLD (e.g. mine=5/2/3)")
    try:
        period, timeout, threshold = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise ValueError(f"{raw!r}: PERIOD and TIMEOUT are seconds, THRESHOLD a whole number") from None
    if not (0 < period <= 3600 and 0 < timeout <= SAMPLE_TIMEOUT_S and 1 <= threshold <= 1000):
        raise ValueError(f"{raw!r}: needs 0 < PERIOD <= 3600, 0 < TIMEOUT <= {SAMPLE_TIMEOUT_S:g} "
                         "(the longest a probe is waited for), 1 <= THRESHOLD <= 1000")
    return Setting(name.strip(), period, timeout, threshold, "--setting")


@dataclass(frozen=True)
class Sample:
    """One probe sent: when (monotonic), how long it took (None: no answer in time), its result."""

    t: float
    latency_s: float | None
    ok: bool


def replay(samples: Sequence[Sample], setting: Setting, t0: float, window_s: float) -> float | None:
    """Seconds after ``t0`` at which ``setting`` would have declared the server dead, or None.

    The kubelet's probes go at ``t0 + k × period``; each is read from the sample sent
    nearest to that moment (within ``SAMPLE_S``): it fails when the sample failed or
    took longer than the setting's timeout.  The kill is when the
    ``failure_threshold``-th failure in a row has timed out or answered.
    """
    ordered = sorted(samples, key=lambda s: s.t)
    run = 0
    k = 0
    while k * setting.period_s <= window_s:
        at = t0 + k * setting.period_s
        k += 1
        near = min(ordered, key=lambda s: abs(s.t - at), default=None)
        if near is None or abs(near.t - at) > SAMPLE_S:
            continue
        failed = not near.ok or near.latency_s is None or near.latency_s > setting.timeout_s
        run = run + 1 if failed else 0
        if run >= setting.failure_threshold:
            answered = near.latency_s if near.latency_s is not None else setting.timeout_s
            return round(at - t0 + min(answered, setting.timeout_s), 2)
    return None


@dataclass
class Run:
    """One state × guard measured on a real server."""

    state: str
    guard: bool
    window_s: float
    #: seconds from the state's start to the engine's death (None: it lived through the window)
    died_after_s: float | None = None
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    t0: float = 0.0
    note: str = ""

    def kill_after(self, kind: str, setting: Setting) -> float | None:
        return replay(self.samples.get(kind, []), setting, self.t0, self.window_s)

    def first_failure_s(self, kind: str) -> float | None:
        for s in sorted(self.samples.get(kind, []), key=lambda s: s.t):
            if s.t >= self.t0 and not s.ok:
                return round(s.t - self.t0, 2)
        return None


def cell(run: Run, kind: str, setting: Setting) -> str:
    """What one setting of one probe did in one run, in a few words."""
    kill = run.kill_after(kind, setting)
    died = run.died_after_s
    if run.state == "SLOW":
        if kill is None:
            return f"no kill in {run.window_s:g}s"
        if died is not None and kill >= died:
            return f"dead at {died:g}s anyway"
        return f"FALSE KILL at {kill:g}s"
    if kill is None:
        return f"not found in {run.window_s:g}s"
    return f"found at {kill:g}s"


def table(runs: Sequence[Run], settings: Sequence[Setting] = SETTINGS) -> str:
    heads = [f"{r.state}, guard {'on' if r.guard else 'off'}" for r in runs]
    rows = [["probe", "setting (period/timeout/threshold)", *heads]]
    for kind in PROBES:
        for setting in settings:
            rows.append([kind, setting.describe(), *(cell(r, kind, setting) for r in runs)])
    rows.append(["(the engine)", "its death", *(
        "lived" if r.died_after_s is None else f"died at {r.died_after_s:g}s" for r in runs)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def to_json(runs: Sequence[Run], settings: Sequence[Setting] = SETTINGS) -> dict[str, Any]:
    return {
        "settings": [asdict(s) for s in settings],
        "runs": [{
            "state": r.state, "guard": r.guard, "window_s": r.window_s, "died_after_s": r.died_after_s,
            "note": r.note,
            "probes": {kind: {
                "first_failure_s": r.first_failure_s(kind),
                "samples": len(r.samples.get(kind, [])),
                "kill_after_s": {s.name: r.kill_after(kind, s) for s in settings},
            } for kind in PROBES},
        } for r in runs],
    }


# --- the measurement (real servers) -----------------------------------------------------


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
    return lambda: probe_mod.probe(port=port).alive


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


def measure(state: str, guarded: bool, model: str, window_s: float, hang_s: float,
            progress: Progress | None = None) -> Run:
    """Start one server, put its engine in ``state``, sample every probe for ``window_s``."""
    from .server import PROMPT_WORDS, Server

    slow = state == "SLOW"
    guard = GuardSpec(hang_s, "reference", "enginedead probes") if guarded else None
    spec = EngineSpec(model, SLOW_CLIENTS if slow else 8, guard=guard, server=True)
    faults = Injection(slow_s_per_seq=SLOW_S_PER_SEQ) if slow else Injection(hang_at_step=2)
    deadline = SLOW_DEADLINE_S if slow else HUNG_DEADLINE_S
    run = Run(state, guarded, window_s)
    reaper = Reaper()
    server = Server(spec, reaper)
    try:
        server.start(Instructions(deadline, "enginedead probes", faults), progress)
        port, name = server.port, server.served_name
        steps_each = math.ceil(window_s / (SLOW_S_PER_SEQ * SLOW_CLIENTS)) + 2
        clients = SLOW_CLIENTS if slow else 8
        prompt = " ".join(PROMPT_WORDS[:4])
        body = {"model": name, "prompt": prompt, "max_tokens": steps_each if slow else 4,
                "ignore_eos": True, "temperature": 0.0}

        def client() -> None:
            with contextlib.suppress(OSError, http.client.HTTPException):
                _http(port, "POST", "/v1/completions", body)

        lock = threading.Lock()
        run.samples = {kind: [] for kind in PROBES}
        fns = {kind: _probe_fn(kind, port, name) for kind in PROBES}
        for _ in range(clients):
            threading.Thread(target=client, daemon=True).start()
        run.t0 = time.monotonic()
        if progress:
            progress(f"{state}, guard {'on' if guarded else 'off'}: {clients} clients, probing for "
                     f"{window_s:g} s")
        end = run.t0 + window_s
        died_at: float | None = None
        next_at = run.t0
        while time.monotonic() < end:
            for kind in PROBES:
                threading.Thread(target=_sample, args=(fns[kind], run.samples[kind], lock),
                                 daemon=True).start()
            if died_at is None and not server.engine_core_alive():
                died_at = time.monotonic()
            if not slow and not run.note:
                stuck = [st for st in server.steps() if st.running]
                if stuck:  # the HUNG state begins when the worker enters its hung step
                    run.note = f"the hang began {stuck[0].started - run.t0:.2f} s after the clients"
                    end += stuck[0].started - run.t0
                    run.t0 = stuck[0].started
            next_at += SAMPLE_S
            time.sleep(max(0.0, next_at - time.monotonic()))
        if died_at is not None:
            run.died_after_s = round(died_at - run.t0, 2)
        time.sleep(min(SAMPLE_TIMEOUT_S, 2.0))
    finally:
        server.hurry = True
        server.stop()
        reaper.close()
    with lock:
        run.samples = {k: list(v) for k, v in run.samples.items()}
    return run


def measure_all(model: str, window_s: float = DEFAULT_WINDOW_S, hang_s: float = DEFAULT_HANG_S,
                progress: Progress | None = None,
                cases: Sequence[tuple[str, bool]] | None = None) -> list[Run]:
    """Every state × guard (or ``cases``), one server each, one after the other."""
    cases = cases or [(state, guarded) for state in STATES for guarded in (False, True)]
    return [measure(state, guarded, model, window_s, hang_s, progress) for state, guarded in cases]
