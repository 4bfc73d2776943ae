"""A death as the run keeps it: its verdict, the evidence behind it, the engine's facts.

The judge (``harness.judging.verdict``) makes a ``Finding``; its ``record()`` is this
``DeathRecord``, which the report's rows hold and the terminal, the report file, junitxml and
``enginedead check`` read as values.  As JSON (the report file, the xdist wire) a record is
written by ``DeathRecord.to_dict`` and read back by ``DeathRecord.from_dict`` alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ...contract.decisions import Verdict
from .where import Where


@dataclass(frozen=True)
class StepRef:
    """The step a process was in: its number and batch (``running``: a remote rank's own word)."""

    step: int
    batch_size: int
    running: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step, "batch_size": self.batch_size}
        if self.running is not None:
            out["running"] = self.running
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> StepRef | None:
        if data is None:
            return None
        running = data.get("running")
        return cls(int(data["step"]), int(data["batch_size"]), None if running is None else bool(running))


@dataclass(frozen=True)
class JudgedProcess:
    """One local process as the verdict judged it."""

    pid: int
    title: str
    alive: bool
    status: str
    #: its CPU over ``window_s``, in cores
    cpu_cores: float
    window_s: float
    #: the step it was computing, when the verdict is about one
    step: StepRef | None = None
    #: judged as of the deadline, from its own dump then (by the verdict it had moved on)
    judged_at_deadline: bool = False
    #: with several ranks: its rank ("TP1", "node 0 TP0") and what it was doing, in words
    rank: str | None = None
    rank_state: str | None = None
    #: the judge's words on it (``contract.judge``): "spinning: 100 % CPU, no layer finished for ..."
    reason: str | None = None
    #: when its step's forward pass would have ended at its pace (seconds after the verdict; None: unknown)
    ends_in_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pid": self.pid, "title": self.title, "alive": self.alive, "status": self.status,
            "cpu_cores": round(self.cpu_cores, 3), "window_s": round(self.window_s, 3),
            "step": None if self.step is None else self.step.to_dict(),
            "judged_at_deadline": self.judged_at_deadline,
        }
        if self.rank is not None:
            out.update(rank=self.rank, rank_state=self.rank_state)
        if self.reason is not None:
            out["reason"] = self.reason
        if self.ends_in_s is not None:
            out["ends_in_s"] = round(self.ends_in_s, 2)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgedProcess:
        ends = data.get("ends_in_s")
        return cls(int(data["pid"]), str(data["title"]), bool(data["alive"]), str(data["status"]),
                   float(data["cpu_cores"]), float(data["window_s"]), StepRef.from_dict(data.get("step")),
                   bool(data.get("judged_at_deadline")), data.get("rank"), data.get("rank_state"),
                   data.get("reason"), None if ends is None else float(ends))


@dataclass(frozen=True)
class RemoteRank:
    """A rank on another node as the verdict judged it: from the progress it publishes."""

    node: int
    rank: int
    #: its pid in its own node's PID namespace
    pid_in_node: int
    title: str
    host: str
    verdict: Verdict
    state: str
    cpu_cores: float
    window_s: float
    #: how long since its last record
    silent_s: float
    step: StepRef | None = None
    #: the judge's words on it, from its published progress
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "node": self.node, "rank": self.rank, "pid_in_node": self.pid_in_node, "title": self.title,
            "host": self.host, "verdict": self.verdict.name, "state": self.state,
            "cpu_cores": round(self.cpu_cores, 3), "window_s": round(self.window_s, 3),
            "silent_s": round(self.silent_s, 3), "step": None if self.step is None else self.step.to_dict(),
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RemoteRank:
        return cls(int(data["node"]), int(data["rank"]), int(data["pid_in_node"]), str(data["title"]),
                   str(data["host"]), Verdict.parse(data["verdict"]), str(data["state"]),
                   float(data["cpu_cores"]), float(data["window_s"]), float(data["silent_s"]),
                   StepRef.from_dict(data.get("step")), data.get("reason"))


@dataclass(frozen=True)
class DeathFacts:
    """The engine's facts at a death, beside the process evidence: what the test ran under."""

    batch_size: int | None = None
    #: the deadline in force, and where it came from ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=2, set
    #: from the enginedead_timeout marker")
    deadline_s: float | None = None
    deadline_source: str | None = None
    #: the active policy, and what it allows at this batch size on CPU
    policy: str | None = None
    policy_deadline_s: float | None = None
    model: str | None = None
    #: the guard's cap, when the guard's cap ended the step
    guard_cap_s: float | None = None
    #: the guard's last decision, in words (or that it made none)
    guard: str | None = None
    #: what a server's clients saw
    clients: str | None = None
    #: the steps finished so far: count, p50, the longest
    step_summary: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The facts that are known, in this order (the report leaves out the rest)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: value for name, value in values.items() if value not in (None, "")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeathFacts:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class DeathRecord:
    """The verdict on one engine death, with the evidence behind it, as the run keeps it."""

    verdict: Verdict
    #: the error the test saw (``EngineDeadError``)
    error: str
    #: seconds from the call's start to the verdict, and how long judging took
    elapsed_s: float
    verdict_s: float
    processes: tuple[JudgedProcess, ...] = ()
    remote_ranks: tuple[RemoteRank, ...] = ()
    stack: str | None = None
    where: Where | None = None
    #: slow paths the configuration sent the step down, one line each with its fix
    slow_paths: tuple[str, ...] = ()
    facts: DeathFacts = field(default_factory=DeathFacts)

    @property
    def false_death(self) -> bool:
        return self.verdict.false_death

    def to_dict(self) -> dict[str, Any]:
        """The record as the report file and the xdist wire hold it (report.schema.json)."""
        return {
            "verdict": self.verdict.name,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 3),
            "verdict_s": round(self.verdict_s, 4),
            "processes": [p.to_dict() for p in self.processes],
            **({"remote_ranks": [r.to_dict() for r in self.remote_ranks]} if self.remote_ranks else {}),
            "stack": self.stack,
            "where": self.where.to_dict() if self.where else None,
            **({"slow_paths": list(self.slow_paths)} if self.slow_paths else {}),
            **self.facts.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeathRecord:
        """A record as ``to_dict`` wrote it; ``ValueError`` names a verdict it does not know."""
        where = data.get("where")
        return cls(
            Verdict.parse(data["verdict"]), str(data["error"]), float(data["elapsed_s"]),
            float(data["verdict_s"]), tuple(JudgedProcess.from_dict(p) for p in data.get("processes") or ()),
            tuple(RemoteRank.from_dict(r) for r in data.get("remote_ranks") or ()), data.get("stack"),
            None if where is None else Where.from_dict(where), tuple(data.get("slow_paths") or ()),
            DeathFacts.from_dict(data),
        )


def death_counts(deaths: Sequence[DeathRecord]) -> tuple[int, int]:
    """(false deaths, genuine deaths) among ``deaths``."""
    false = sum(1 for d in deaths if d.false_death)
    return false, len(deaths) - false
