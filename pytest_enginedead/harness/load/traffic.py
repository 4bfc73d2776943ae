"""Continuous client load on a served engine: steady clients plus bursts on demand.

The same ``openai.AsyncOpenAI`` requests ``ServerHandle.complete`` sends (``max_retries=0``,
temperature 0, ``ignore_eos``, token-id prompts), kept up for as long as a soak runs:
``clients`` steady clients each keep one request in flight (half of them streamed), and
``burst`` / ``context_limit`` / ``disconnect`` add a batch of requests at once.  Every
request's start, end and outcome is kept (``Request``); a client whose request failed
waits ``backoff_s`` before its next one, as a client with a retry policy would.

The requests run on an event loop of their own thread: the caller (the soak's main
thread) stays free to watch the server and to take Ctrl-C.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import threading
import time
from collections.abc import Coroutine
from typing import Any

from ...logic.soak.judge import Outcome, Request
from ..waiting import wait_until
from .clients import describe_client_error

#: a batch of requests: done when every one of them has ended
Done = concurrent.futures.Future[None]


class Traffic:
    """Clients of one served model whose address may change (a restarted server)."""

    def __init__(self, model: str, clients: int, timeout_s: float = 300.0, backoff_s: float = 1.0,
                 vocab: int = 1000, seed: int = 0) -> None:
        self.model = model
        self.clients = clients
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.vocab = max(4, vocab)
        self.base_url = ""
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="enginedead-traffic", daemon=True)
        self._steady: list[Done] = []
        self._api: dict[str, Any] = {}
        self._inflight = 0

    # --- the caller's side --------------------------------------------------------------

    def start(self, base_url: str) -> None:
        """Point the clients at ``base_url`` and start the steady ones."""
        self.base_url = base_url
        self._thread.start()
        self._steady = [self._submit(self._steady_client(i)) for i in range(self.clients)]

    def burst(self, n: int, max_tokens: int = 16) -> Done:
        """``n`` requests at once (non-streamed); the future is done when all have ended."""
        return self._submit(self._batch("burst", n, lambda i: self._one("burst", 4, max_tokens, False)))

    def context_limit(self, n: int, prompt_len: int, max_tokens: int) -> Done:
        """``n`` requests whose prompt and output fill the context to its limit."""
        return self._submit(self._batch(
            "context_limit", n, lambda i: self._one("context_limit", prompt_len, max_tokens, i % 2 == 1)))

    def disconnect(self, n: int, after_chunks: int = 2, max_tokens: int = 64) -> Done:
        """``n`` streams the client closes after ``after_chunks`` chunks (vLLM must abort them)."""
        return self._submit(self._batch("disconnect", n,
                                        lambda i: cut_stream(self, after_chunks, max_tokens)))

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the clients: requests in flight get ``grace_s``, then are cut (``Outcome.CUT``)."""
        self._stopping = True
        if not self._thread.is_alive():
            return
        wait_until(lambda: not self._inflight, grace_s)
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            self._submit(self._close()).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    @property
    def inflight(self) -> int:
        return self._inflight

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    # --- on the clients' loop -------------------------------------------------------------

    def _submit(self, coro: Coroutine[Any, Any, None]) -> Done:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _client(self) -> Any:
        import openai

        url = self.base_url
        if url not in self._api:
            self._api[url] = openai.AsyncOpenAI(base_url=url, api_key="enginedead", max_retries=0,
                                                timeout=self.timeout_s)
        return self._api[url]

    def _prompt(self, n: int) -> list[int]:
        return [self._rng.randrange(3, min(self.vocab, 1000)) for _ in range(n)]

    def _record(self, kind: str, start: float, outcome: Outcome | BaseException) -> None:
        """How a request ended: an ``Outcome``, or the error it failed with."""
        end = time.monotonic()
        record = (Request(kind, start, end, outcome) if isinstance(outcome, Outcome)
                  else Request.failing(kind, start, end, describe_client_error(outcome)))
        with self._lock:
            self.requests.append(record)

    async def _steady_client(self, i: int) -> None:
        rng = random.Random(1000 + i)
        while not self._stopping:
            ok = await self._one("steady", rng.randint(4, 16), rng.randint(8, 32), rng.random() < 0.5)
            if not ok and not self._stopping:
                await asyncio.sleep(self.backoff_s)

    async def _batch(self, kind: str, n: int, make: Any) -> None:
        await asyncio.gather(*(make(i) for i in range(n)), return_exceptions=True)

    async def _one(self, kind: str, prompt_len: int, max_tokens: int, stream: bool) -> bool:
        """One completion; whether it was served."""
        start = time.monotonic()
        self._inflight += 1
        try:
            args = dict(model=self.model, prompt=self._prompt(prompt_len), max_tokens=max_tokens,
                        temperature=0.0, extra_body={"ignore_eos": True})
            client = self._client()
            if stream:
                async for _ in await client.completions.create(stream=True, **args):
                    pass
            else:
                await client.completions.create(**args)
        except asyncio.CancelledError:
            self._record(kind, start, Outcome.CUT)
            raise
        except Exception as exc:
            self._record(kind, start, Outcome.CUT if self._stopping else exc)
            return False
        finally:
            self._inflight -= 1
        self._record(kind, start, Outcome.OK)
        return True

    async def _close(self) -> None:
        for fut in self._steady:
            fut.cancel()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        for api in self._api.values():
            with contextlib.suppress(Exception):
                await api.close()
        self._api.clear()


async def cut_stream(traffic: Traffic, after_chunks: int, max_tokens: int) -> None:
    """One stream its client closes after ``after_chunks`` chunks: ``Outcome.DISCONNECTED`` (on purpose)."""
    start = time.monotonic()
    traffic._inflight += 1
    try:
        stream = await traffic._client().completions.create(
            model=traffic.model, prompt=traffic._prompt(8), max_tokens=max_tokens, temperature=0.0,
            extra_body={"ignore_eos": True}, stream=True)
        seen = 0
        async for _ in stream:
            seen += 1
            if seen >= after_chunks:
                break
        await stream.close()  # the client goes away mid-stream
        traffic._record("disconnect", start, Outcome.DISCONNECTED if seen >= after_chunks else Outcome.OK)
    except asyncio.CancelledError:
        traffic._record("disconnect", start, Outcome.CUT)
        raise
    except Exception as exc:
        traffic._record("disconnect", start, Outcome.CUT if traffic._stopping else exc)
    finally:
        traffic._inflight -= 1
