"""What operators' probes make of a SLOW and a HUNG server, and how fast each probe answers.

``python bench/run.py probes`` runs ``enginedead probe-settings --json`` (four real API servers: SLOW
and HUNG, the guard off and on) and keeps its answer: each probe setting's verdict per server, each
probe kind's answer times, and when the first ``enginedead probe`` failed after the hang began.
The benchmarks page's probe tables are made from this record (``bench/engine_figures.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

#: seconds each state is probed: the slowest common setting (30 s period, 3 failures) needs 90
WINDOW_S = 90

COMMAND = f"enginedead probe-settings --window {WINDOW_S} --json"


def bench_probes() -> dict[str, Any]:
    """``enginedead probe-settings``' JSON answer, and the release it ran on."""
    cmd = [sys.executable, "-m", "pytest_enginedead.command", "probe-settings", "--window", str(WINDOW_S),
           "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3000)
    if out.returncode != 0:
        raise RuntimeError(f"probe-settings exited {out.returncode}:\n{out.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(out.stdout)
    for run in found["runs"]:
        took = run["probes"]["enginedead probe"]["answers"]
        print(f"  {run['state']}, guard {'on' if run['guard'] else 'off'}: enginedead probe median "
              f"{took['median_s']} s, max {took['max_s']} s ({took['answered']} of {took['sent']})",
              flush=True)
    return {**found, "command": COMMAND}
