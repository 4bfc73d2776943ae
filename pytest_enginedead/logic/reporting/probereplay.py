"""Probe settings replayed over sampled answers: when would a kubelet have restarted the server?

A setting is a period, a timeout and a failure threshold (the Kubernetes fields); the
replay is pure and unit-tested, the samples come from real servers (``harness.probing.trials``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ...contract.decisions import Verdict

#: how often each probe kind is sent while a state lasts
SAMPLE_S = 0.5

#: the longest a sampled probe may take (above every setting's timeout)
SAMPLE_TIMEOUT_S = 20.0

PROBES = ("GET /health", "GET /v1/models", "1-token completion", "enginedead probe")

STATES = (Verdict.SLOW, Verdict.HUNG)


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


@dataclass(frozen=True)
class Answers:
    """How one probe kind answered while a state lasted: the samples sent from its start, how many
    got an answer (a failing one included) within ``SAMPLE_TIMEOUT_S``, the median and the longest."""

    sent: int
    answered: int
    median_s: float | None
    max_s: float | None


def answers(samples: Sequence[Sample], t0: float) -> Answers:
    """What the samples sent from ``t0`` on took to answer."""
    sent = [s for s in samples if s.t >= t0]
    took = [s.latency_s for s in sent if s.latency_s is not None]
    if not took:
        return Answers(len(sent), 0, None, None)
    return Answers(len(sent), len(took), round(statistics.median(took), 3), round(max(took), 3))


@dataclass(frozen=True)
class Conditions:
    """What made the states: the SLOW engine's deadline, clients and step, the HUNG engine's
    deadline, the guard's ``hang_s``, how long each state was probed and how often."""

    window_s: float
    sample_s: float
    slow_deadline_s: float
    slow_clients: int
    slow_s_per_seq: float
    hung_deadline_s: float
    hang_s: float


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

    state: Verdict
    guard: bool
    window_s: float
    #: seconds from the state's start to the engine's death (None: it lived through the window)
    died_after_s: float | None = None
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    t0: float = 0.0
    note: str = ""

    def kill_after(self, kind: str, setting: Setting) -> float | None:
        return replay(self.samples.get(kind, []), setting, self.t0, self.window_s)

    def answers(self, kind: str) -> Answers:
        return answers(self.samples.get(kind, []), self.t0)

    def first_failure_s(self, kind: str) -> float | None:
        for s in sorted(self.samples.get(kind, []), key=lambda s: s.t):
            if s.t >= self.t0 and not s.ok:
                return round(s.t - self.t0, 2)
        return None


def cell(run: Run, kind: str, setting: Setting) -> str:
    """What one setting of one probe did in one run, in a few words."""
    kill = run.kill_after(kind, setting)
    died = run.died_after_s
    if run.state is Verdict.SLOW:
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


def to_json(runs: Sequence[Run], settings: Sequence[Setting] = SETTINGS,
            conditions: Conditions | None = None) -> dict[str, Any]:
    return {
        "conditions": asdict(conditions) if conditions else None,
        "settings": [asdict(s) for s in settings],
        "runs": [{
            "state": r.state.name, "guard": r.guard, "window_s": r.window_s, "died_after_s": r.died_after_s,
            "note": r.note,
            "probes": {kind: {
                "first_failure_s": r.first_failure_s(kind),
                "samples": len(r.samples.get(kind, [])),
                "answers": asdict(r.answers(kind)),
                "kill_after_s": {s.name: r.kill_after(kind, s) for s in settings},
                "says": {s.name: cell(r, kind, s) for s in settings},
            } for kind in PROBES},
        } for r in runs],
    }
