"""An offline engine: one ``vllm.LLM`` in this process, with its process tree.

``VLLM::EngineCore`` → ``VLLM::Worker``.  Its deadline and the worker-side instructions
travel in the environment, set just before the engine starts (vLLM freezes them in its
processes) and only while it starts.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import psutil

from ...compat import llm_api, llm_config
from ...contract.guardfiles import read_core_ready
from ...logic.planning.engines import DeadlineAndFaults, EngineSpec
from ..waiting import bounded, interruptible, wait_until
from .base import EngineBase
from .coreready import EngineStartError, GuardRefused, guard_problem
from .environment import cleared_variables, engine_arguments
from .reaper import Reaper


class Engine(EngineBase):
    """One real offline vLLM CPU engine (``vllm.LLM`` in this process) and its processes."""

    # vLLM's own shutdown of an offline engine SIGTERMs its engine core, which does not
    # exit on it (0.32.0: it waits on its worker, then on nothing), and SIGKILLs it after
    # 5 s: 5 s of every stop for nothing the harness needs.  The worker exits on SIGTERM at
    # once; the engine core gets a second, then SIGKILL; the client is closed after.
    graceful_stop = False
    stop_grace_s = 1.0
    start_failure = "vLLM could not start an engine on {model}: {kind}: {exc}"

    def __init__(self, spec: EngineSpec, reaper: Reaper | None = None) -> None:
        super().__init__(spec, reaper)
        self.llm: Any = None
        self._vocab = _vocab_size(spec.model)
        self._me = psutil.Process()
        self._before: set[int] = set()
        self._refusal: str | None = None
        self._node_failed: str | None = None
        self.import_s: float | None = None  # of the start, importing vLLM in this process (0 once imported)

    def launch(self, first: DeadlineAndFaults) -> None:
        env = self.environment(first)
        self._before = {p.pid for p in self._me.children(recursive=True)}
        kwargs = llm_config.llm_kwargs(self.spec.model, self.spec.max_num_seqs,
                                       {**engine_arguments(self.spec), **self.multi_node_arguments()})
        watch = _RefusalWatch(self, self._me, self._before)
        try:
            # vLLM configures its logging when first imported: import it inside the
            # engine's environment, which its spawned processes inherit
            with _environ(env, cleared_variables(self.spec)), watch:
                # what importing and starting vLLM warns of is not the test's: torch's
                # DeprecationWarnings (14 of torch.utils.mkldnn's, at import on 0.32.0, during the
                # start on 0.27.1) would land in the user's warnings summary
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.monotonic()
                    from vllm import LLM  # here: the plugin loads without vLLM

                    self.import_s = time.monotonic() - t0
                    self.llm = interruptible(lambda: LLM(**kwargs), "enginedead-start")
        finally:
            self._refusal, self._node_failed = watch.refusal, watch.node_failed
        llm_api.quiet_repr(self.llm)

    def adopt_started(self) -> None:
        if self.hurry:  # interrupted: the engine core may be about to spawn
            self._settle()
        self.adopt(self._me, self._before)

    def start_error(self, exc: BaseException) -> EngineStartError | None:
        if self._refusal is not None:  # the engine core was ended for it: that is the reason
            return GuardRefused(self._refusal)
        if self._node_failed is not None:
            return EngineStartError(f"vLLM could not start an engine on {self.spec.model}: "
                                    f"{self._node_failed}")
        return super().start_error(exc)

    def _settle(self, limit_s: float = 5.0) -> None:
        """After an interrupted start: wait (briefly) for the engine core vLLM's start thread
        is about to spawn, so that it is stopped with the rest instead of left behind."""
        def spawned() -> bool:
            self.adopt(self._me, self._before)
            return bool(self.procs)

        wait_until(spawned, limit_s)

    @property
    def alive(self) -> bool:
        return self.llm is not None and not self.broken and self.nodes_alive

    def stop(self) -> None:
        if self.llm is not None:
            llm_api.expect_exit(self.llm)  # its client must not take this stop for a death
        super().stop()

    def shutdown(self, give_up: Callable[[], bool] | None = None) -> None:
        llm, self.llm = self.llm, None
        if llm is None:
            return
        wait_s = 1.0 if give_up is None else 5.0 if self.broken else 10.0
        bounded(functools.partial(llm_api.shutdown_llm, llm), wait_s, give_up or (lambda: False))

    def generate(
        self, n: int, max_tokens: int = 8, prompt_len: int = 4,
        arriving: int | Sequence[int] | None = None,
    ) -> list[list[int]]:
        """One concurrent decode batch of ``n`` sequences; token ids per sequence.

        ``arriving``: that many requests join before each step instead of all at once.
        """
        if self.llm is None:
            raise RuntimeError("engine is stopped")
        if self.broken:
            raise RuntimeError("engine is unusable after an earlier failure; it is being replaced")
        rng = random.Random(n * 1000 + prompt_len)
        hi = max(10, self._vocab - 1)
        prompts = [
            llm_api.token_prompt([rng.randrange(3, hi) for _ in range(prompt_len)])
            for _ in range(n)
        ]
        params = llm_api.sampling_params(max_tokens)
        ok = False
        try:
            llm = self.llm
            if arriving:
                outputs = interruptible(
                    lambda: llm_api.generate_arriving(llm, prompts, params, arriving), "enginedead-generate"
                )
            else:
                outputs = interruptible(
                    lambda: llm.generate(prompts, params, use_tqdm=False), "enginedead-generate"
                )
            ok = True
        finally:
            if not ok:
                self.broken = True
        return [llm_api.output_token_ids(o) for o in outputs]

    def prompts(self, lengths: list[int], seed: int, prefix: list[int] | None = None) -> list[list[int]]:
        """Distinct random token-id prompts of these lengths (the first may start with ``prefix``)."""
        rng = random.Random(seed)
        hi = max(10, self._vocab - 1)
        out = [[rng.randrange(3, hi) for _ in range(n)] for n in lengths]
        if prefix and out:
            out[0][: len(prefix)] = prefix[: len(out[0])]
        return out

    def drive(self, waves: list[tuple[list[list[int]], int]]) -> None:
        """Send waves of (prompts, max_tokens); each once every earlier request has its first token."""
        if self.llm is None or self.broken:
            raise RuntimeError("engine is stopped or unusable")
        ok = False
        try:
            llm_api.drive(self.llm, [(prompts, llm_api.sampling_params(n)) for prompts, n in waves])
            ok = True
        finally:
            if not ok:
                self.broken = True


@contextlib.contextmanager
def _environ(values: Mapping[str, str], unset: Iterable[str] = ()) -> Iterator[None]:
    """``values`` set and ``unset`` removed in ``os.environ`` for the block, then restored."""
    unset = [k for k in unset if k not in values]
    saved = {k: os.environ.get(k) for k in [*values, *unset]}
    os.environ.update(values)
    for k in unset:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _RefusalWatch:
    """While ``vllm.LLM(...)`` starts: as soon as the engine core's record shows the guard
    refused, or a headless node exited (the head would wait for it), end the engine core
    (ours, by pid), so that the start fails at once instead of running on to a ready engine
    that will not be used, or waiting for a node that will never come."""

    def __init__(self, engine: EngineBase, me: psutil.Process, before: set[int], every_s: float = 0.1):
        self.engine, self.me, self.before, self.every_s = engine, me, before, every_s
        self.refusal: str | None = None
        self.node_failed: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            failed = self.engine.node_failure()  # the head would wait for it at the master's port
            if failed is not None:
                self.node_failed = failed
                self._end_core(None)
                return
            ready = read_core_ready(self.engine.run_dir)
            if ready is None:
                continue
            self.refusal = guard_problem(self.engine.spec.guard, ready)
            if self.refusal is not None:
                self._end_core(ready.pid)
            if self.engine.nodes is None or self.refusal is not None:
                return

    def _end_core(self, pid: int | None) -> None:
        """End the engine core (ours, pinned by pid and creation time): the start fails at once."""
        with contextlib.suppress(psutil.Error):
            self.engine.adopt(self.me, self.before)  # recorded (and reaped) like any start
            for ref in self.engine.procs:
                proc = ref.process()
                if proc is not None and (ref.pid == pid or (pid is None and proc.ppid() == self.me.pid)):
                    proc.kill()

    def __enter__(self) -> _RefusalWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=1)


def _vocab_size(model: str) -> int:
    with contextlib.suppress(OSError, ValueError, TypeError):
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        vocab = cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size")
        if isinstance(vocab, int) and vocab > 10:
            return vocab
    return 1000
