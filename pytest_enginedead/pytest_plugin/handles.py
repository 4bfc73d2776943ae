"""What a test holds: a handle on a (possibly shared) engine or server at its batch size.

Handles carry the test's deadline and faults, drive the engine (``generate``, ``complete``),
and show its evidence to ``assert_no_false_death`` through ``harness.judging.verdict.Inspectable``:
the engine's records via ``evidence``, the test's facts via ``death_facts``.  A bad argument
to a handle fails the test in one line, before the engine sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn

import pytest

from ..compat import in_server
from ..contract.decisions import GuardAction
from ..contract.guardfiles import GuardEvent
from ..contract.steps import StepTime
from ..harness.engines.base import EngineBase
from ..harness.engines.offline import Engine
from ..harness.engines.server import PROMPT_WORDS, Server, has_tokenizer
from ..harness.judging.evidence import RunEvidence
from ..harness.judging.liveness import LivenessSettings, ProcessEvidence
from ..harness.judging.verdict import Finding
from ..harness.load.clients import ClientOutcome, describe_client_error, run_async
from ..harness.waiting import wait_until
from ..logic import releases
from ..logic.inputs.arguments import BadMarker, complete_arguments, generate_arguments
from ..logic.inputs.modelconfig import model_name
from ..logic.planning.engines import DeadlineAndFaults, EngineSpec
from ..logic.reporting.deaths import DeathFacts


def refuse(exc: BadMarker) -> NoReturn:
    """A handle's bad argument fails the test in its one line, before the engine sees it."""
    __tracebackhide__ = True
    raise pytest.fail.Exception(str(exc), pytrace=False) from None


class Handle:
    """What a test holds: a (possibly shared) engine at its batch size and deadline."""

    def __init__(
        self,
        engine: EngineBase,
        batch_size: int,
        instructions: DeadlineAndFaults,
        policy_name: str = "",
        policy_deadline_s: float | None = None,
        liveness_settings: LivenessSettings | None = None,
    ) -> None:
        self._engine = engine
        self.batch_size = batch_size
        #: this test's deadline and faults (the engine may have run others before)
        self.instructions = instructions
        self.policy_name = policy_name
        #: what the active policy would allow at this batch size
        self.policy_deadline_s = policy_deadline_s
        #: how assert_no_false_death judges this engine (the run's options)
        self.liveness_settings = liveness_settings or LivenessSettings()
        #: the verdicts on engine deaths seen through this handle (``assert_no_false_death``)
        self.findings: list[Finding] = []
        self._since = time.monotonic()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} bs{self.batch_size} {self.instructions.describe()}; "
            f"{self._engine.spec.label()}>"
        )

    @property
    def spec(self) -> EngineSpec:
        return self._engine.spec

    @property
    def timeout_s(self) -> float:
        """The execute-model deadline in force for this test, in seconds (as vLLM sees it)."""
        return self.instructions.deadline_whole_s

    @property
    def guard_hang_s(self) -> float | None:
        """The guard's ``hang_s`` when this engine runs the guard (None: it does not): how long its
        step may go without showing work before the guard ends it, and the verdict calls it stalled."""
        guard = self._engine.spec.guard
        return guard.hang_s if guard is not None else None

    @property
    def deadline_source(self) -> str:
        """Where the deadline came from, as a failure message says it."""
        return (
            f"{releases.DEADLINE_ENV}={self.instructions.deadline_env}, "
            f"set from {self.instructions.deadline_source}"
        )

    @property
    def pids(self) -> list[int]:
        return self._engine.pids

    @property
    def evidence(self) -> RunEvidence:
        """The engine's step records, guard decisions and stacks (what a verdict reads)."""
        return self._engine.evidence

    @property
    def alive(self) -> bool:
        return self._engine.alive

    def step_times(self) -> list[StepTime]:
        """Per-step wall time and batch size, as the worker recorded them."""
        return self._engine.evidence.steps()

    def step_times_since_start(self) -> list[StepTime]:
        """The steps this handle's test ran (the engine may be shared)."""
        return [s for s in self._engine.evidence.steps() if s.started >= self._since]

    def guard_events(self) -> list[GuardEvent]:
        """The guard's decisions while this test ran (empty without the guard)."""
        return [e for e in self._engine.evidence.guard_events() if e.t >= self._since]

    def liveness(self) -> dict[int, ProcessEvidence]:
        """A snapshot of every engine process: status, CPU over 0.2 s, RSS."""
        return self._engine.liveness()

    @property
    def deaths(self) -> list[dict[str, Any]]:
        """The verdicts as the report writes them (``d["verdict"]``: ``"SLOW"``, ``"HUNG"``,
        ``"DEAD"``); ``findings`` holds them as values."""
        return [f.to_dict() for f in self.findings]

    def death_facts(self) -> DeathFacts:
        """What a verdict on this engine's death reports beside the process evidence."""
        facts = DeathFacts(
            batch_size=self.batch_size, deadline_s=self.timeout_s, deadline_source=self.deadline_source,
            policy=self.policy_name or None, policy_deadline_s=self.policy_deadline_s,
            model=model_name(self.spec.model),
        )
        if self.spec.guard is None:
            return facts
        events = self.guard_events()
        if not events:
            return replace(facts, guard=f"{self.spec.guard.describe()}: no decision recorded")
        last = events[-1]
        judged = f" (judged on rank {last.rank} of {last.ranks})" if last.ranks > 1 else ""
        return replace(
            facts, guard_cap_s=last.cap_s if last.action is GuardAction.CAP else None,
            guard=(f"{last.verdict}{judged}, {last.outcome}: {last.method} had run {last.waited_s:.1f} s "
                   f"(vLLM's deadline {last.deadline_s:g} s, the guard's cap {last.cap_s:g} s; "
                   f"{self.spec.guard.describe()})"),
        )

    def note_finding(self, finding: Finding) -> None:
        self.findings.append(finding)
        self._engine.findings.append(finding)

    def stop(self) -> None:
        """Stop the engine now (the next test that needs it gets a fresh one)."""
        self._engine.stop()


class EngineHandle(Handle):
    """What the engine fixtures yield: a real offline engine at one batch size."""

    _engine: Engine

    def generate(
        self, n: int | None = None, max_tokens: int = 8, prompt_len: int = 4,
        arriving: int | Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Run one concurrent decode batch of ``n`` sequences (default: the batch size).

        ``arriving=k``: k requests join before each engine step, as a server's clients
        would, so the decode batch grows while each step prefills only the newcomers;
        ``arriving=[k1, k2, ...]``: k1 before the first step, k2 before the second... (the
        last count repeats), to shape one step: decodes beside newcomers.
        A bad argument fails the test in one line before the engine sees it (the
        engine stays in service).
        """
        __tracebackhide__ = True
        try:
            generate_arguments(n, max_tokens, prompt_len, arriving, self.spec.max_model_len)
        except BadMarker as exc:
            refuse(exc)
        return self._engine.generate(self.batch_size if n is None else n, max_tokens, prompt_len, arriving)


class ServerHandle(Handle):
    """What the server fixtures yield: a real API server at one batch size."""

    _engine: Server

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_outcome: ClientOutcome | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in ``/v1``)."""
        return self._engine.base_url

    @property
    def model(self) -> str:
        """The served model name, for ``model=`` in requests."""
        return self._engine.served_name

    @property
    def port(self) -> int:
        """The port it listens on (127.0.0.1), e.g. for ``enginedead probe --port``."""
        return self._engine.port

    @property
    def log_path(self) -> str:
        """The file the server's own output (its log, vLLM's) goes to."""
        return self._engine.log_path

    @property
    def exit_code(self) -> int | None:
        """The server process's exit status, or None while it runs."""
        return self._engine.exit_code

    def health(self) -> int:
        """The HTTP status of ``GET /health`` now (0 when nothing answers)."""
        return self._engine.health()

    def client_timeout_s(self) -> float:
        """Longer than any wait the engine may make for one step, so clients never give up first."""
        if self.spec.guard is not None:
            return 3600.0
        return min(2 * self.timeout_s + 120.0, float(releases.MAX_DEADLINE_S))

    def prompt(self, i: int, prompt_len: int) -> str | list[int]:
        rng = random.Random(i * 7919 + prompt_len)
        if has_tokenizer(self.spec.model):
            return " ".join(rng.choice(PROMPT_WORDS) for _ in range(prompt_len))
        return [rng.randrange(3, 1000) for _ in range(prompt_len)]

    def complete(
        self, n: int | None = None, max_tokens: int = 8, prompt_len: int = 4, stream: bool = False
    ) -> list[list[int]]:
        """``n`` concurrent completions through ``openai.AsyncOpenAI``; token ids per request.

        Raises the first failure (the others are counted in ``last_outcome``).  A bad
        argument fails the test in one line before any request is sent.
        """
        __tracebackhide__ = True
        try:
            complete_arguments(n, max_tokens, prompt_len, stream, self.spec.max_model_len,
                                       bos=has_tokenizer(self.spec.model))
        except BadMarker as exc:
            refuse(exc)
        count = self.batch_size if n is None else n
        results = run_async(self._complete_all(count, max_tokens, prompt_len, stream))
        failures: Counter[str] = Counter(
            describe_client_error(r) for r in results if isinstance(r, BaseException)
        )
        self.last_outcome = ClientOutcome(count, failures, time.monotonic())
        first = next((r for r in results if isinstance(r, BaseException)), None)
        if first is not None:
            self._engine.broken = self._engine.broken or not self._engine_healthy()
            raise first
        return [r for r in results if not isinstance(r, BaseException)]

    async def _complete_all(
        self, n: int, max_tokens: int, prompt_len: int, stream: bool
    ) -> list[list[int] | BaseException]:
        import openai

        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key="enginedead", max_retries=0,
            timeout=self.client_timeout_s(),
        )
        try:
            jobs = [self._one(client, i, max_tokens, prompt_len, stream) for i in range(n)]
            return list(await asyncio.gather(*jobs, return_exceptions=True))
        finally:
            await client.close()

    async def _one(
        self, client: Any, i: int, max_tokens: int, prompt_len: int, stream: bool
    ) -> list[int]:
        extra = {"ignore_eos": True, "return_token_ids": True}
        args = dict(model=self.model, prompt=self.prompt(i, prompt_len), max_tokens=max_tokens,
                    temperature=0.0, extra_body=extra)
        if not stream:
            out = await client.completions.create(**args)
            return list(getattr(out.choices[0], "token_ids", None) or [])
        tokens: list[int] = []
        async for chunk in await client.completions.create(stream=True, **args):
            if chunk.choices:
                tokens.extend(getattr(chunk.choices[0], "token_ids", None) or [])
        return tokens

    def _engine_healthy(self) -> bool:
        """Server running, its engine core alive, and /health 200.

        All three: while vLLM's server shuts down after its engine's death, /health can
        answer 200 again (the route finds no engine client and takes it for a render-only
        server), but the engine core process has already exited.
        """
        engine = self._engine
        return engine.exit_code is None and engine.engine_core_alive() and self.health() == 200

    def is_engine_death(self, exc: BaseException) -> bool:
        """Whether a client error means the server's engine died (not a plain bad request)."""
        if releases.is_engine_death(exc) or not in_server.is_openai_failure(exc):
            return releases.is_engine_death(exc)
        # the server exits within ~5 s of its engine
        if wait_until(lambda: not self._engine_healthy(), 12.0, every_s=0.1):
            self._engine.broken = True
            return True
        return False

    def death_facts(self) -> DeathFacts:
        facts = super().death_facts()
        parts = []
        if self.last_outcome is not None and self.last_outcome.at >= self._since:
            parts.append(self.last_outcome.describe())
        status = self.health()
        parts.append(f"/health {status or 'not answering'} afterwards")
        if status != 200:  # vLLM's server exits within ~5 s of its engine's death
            with contextlib.suppress(subprocess.TimeoutExpired):
                if self._engine.proc is not None:
                    self._engine.proc.wait(timeout=8)
        code = self.exit_code
        parts.append("server still running" if code is None else f"server exited (status {code})")
        return replace(facts, clients="; ".join(parts))
