"""Stand-ins the tests of several packages share: vLLM's exception classes by module and name,
a worker's stack dump as faulthandler writes it, a port nothing listens on."""

from __future__ import annotations

import socket


def fake_class(module: str, name: str, base: type[BaseException] = RuntimeError) -> type[BaseException]:
    """An exception class that claims to live in ``module``, without importing it."""
    return type(name, (base,), {"__module__": module})


#: a worker's dump: another thread first, the main thread (named by ``main-thread``) in a step
STACK_DUMP = """main-thread 0x00007f00000000aa
Thread 0x00007f00000000bb (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 622 in wait
Current thread 0x00007f00000000aa (most recent call first):
  File "/site/pytest_enginedead/worker.py", line 82 in burn
  File "/site/pytest_enginedead/worker.py", line 111 in run_step
  File "/site/vllm/v1/worker/worker_base.py", line 300 in execute_model
"""


def free_port() -> int:
    """A port nothing listens on (until something binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
