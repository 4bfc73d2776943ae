"""guidellm (vLLM's load generator) as a second, third-party client of a soak's server.

It is never imported: it runs as its own command (a bench extra, best in a venv of its own,
``pip install guidellm``), against the loopback address only, with a bounded request count,
in a session of its own that is ended by pid.  Its JSON report says how many requests were
served (``benchmarks[0].metrics.request_totals``: ``successful`` / ``errored``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from ...compat import llm_config
from ...logic.soak.judge import Outcome, Request


def find_guidellm(given: str | None = None) -> str | None:
    """The guidellm command: ``given``, else ``$GUIDELLM``, else on PATH; None if none is there."""
    for candidate in (given, os.environ.get("GUIDELLM"), shutil.which("guidellm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def guidellm_command(exe: str, port: int, served: str, model_dir: str, requests: int, streams: int,
                     out: str) -> list[str]:
    """The command line DESIGN.md records as the one that worked with guidellm 0.8."""
    return [
        exe, "run",
        "--backend", f"kind=openai_http,target=http://127.0.0.1:{port},model={served},"
                     "request_format=/v1/completions,timeout=600",
        "--profile", f"kind=concurrent,streams={streams}",
        "--constraint", f"kind=max_requests,count={requests}",
        "--tokenizer", f"kind=huggingface_auto,model={model_dir}",
        "--data", "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
        "--output", f"kind=json,path={out}", "--disable-console-interactive",
    ]


def read_totals(path: str) -> dict[str, int] | None:
    """``successful`` and ``errored`` from guidellm's JSON report, or None if it has none."""
    try:
        with open(path) as f:
            data = json.load(f)
        totals = data["benchmarks"][0]["metrics"]["request_totals"]
        return {"successful": int(totals["successful"]), "errored": int(totals["errored"]),
                "incomplete": int(totals.get("incomplete", 0))}
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def run_guidellm(exe: str, port: int, served: str, model_dir: str, requests: int, streams: int,
                 work_dir: str, wait: Callable[..., bool], limit_s: float = 600.0) -> dict[str, Any]:
    """Run guidellm once against the server; its totals, as requests the soak counts."""
    out = os.path.join(work_dir, "guidellm.json")
    log = os.path.join(work_dir, "guidellm.log")
    env = {**os.environ, **llm_config.OFFLINE_ENV}
    start = time.monotonic()
    with open(log, "wb") as f:
        proc = subprocess.Popen(guidellm_command(exe, port, served, model_dir, requests, streams, out),
                                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        wait(limit_s, lambda: proc.poll() is not None)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    totals = read_totals(out)
    end = time.monotonic()
    if totals is None:
        with contextlib.suppress(OSError), open(log, errors="replace") as f:
            tail = f.read()[-600:]
        return {"requests": requests, "exit": proc.returncode, "totals": None,
                "problem": f"guidellm wrote no report (exit {proc.returncode}): {tail.strip()[-300:]}",
                "records": []}
    records = [Request("guidellm", start, end, Outcome.OK)] * totals["successful"]
    lost = totals["errored"] + totals["incomplete"]
    records += [Request.failing("guidellm", start, end, "guidellm: errored")] * lost
    return {"requests": requests, "exit": proc.returncode, "totals": totals, "seconds": round(end - start, 1),
            "records": records}
