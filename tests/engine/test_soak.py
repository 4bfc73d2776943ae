"""The guard under traffic, short: bench/soak.py on one real server, a slow window and a hang.

One server start (the restart budget is 0, so the hang's death ends the run): steady
clients through a window of busy steps past vLLM's 2 s deadline, then a worker idle
inside its step.  The guard must wait through the first (no request lost, no end) and
end the second within hang_s + two of its looks; nothing may be left behind.  The long
soak (every fault kind, stock beside guarded, Gemma-4, two ranks) is ``make soak``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from pytest_enginedead.contract.names import EXIT_HUNG

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]

#: the suite's soak: 2 s deadline, hang_s 5 s, tiny-llama, max_num_seqs 16, 8 steady clients
SCHEDULE = {
    "deadline_s": 2, "hang_s": 5, "max_num_seqs": 16, "max_model_len": 512, "clients": 8, "repeat": False,
    "faults": [{"kind": "slow", "after_s": 8, "steps": 2}, {"kind": "hang", "after_s": 5}],
}


def test_a_short_soak_loses_nothing_to_a_slow_window_and_ends_the_hang(
    tmp_path: Path, bystander: psutil.Process
) -> None:
    schedule, out = tmp_path / "suite.json", tmp_path / "soak.json"
    schedule.write_text(json.dumps(SCHEDULE))
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--runs", "guarded", "--minutes", "2.5",
         "--restarts", "0", "--schedule", str(schedule), "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert out.exists(), f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    data = json.loads(out.read_text())
    (run,) = data["runs"]
    context = json.dumps({k: run[k] for k in ("windows", "deaths", "requests", "notes")}, indent=1)
    # one server start, which the hang ended: the guard's exit status, no restart
    assert run["restarts"] == 0 and run["server_exits"] == [EXIT_HUNG], context
    slow, hang = run["windows"]
    # the slow window: steps past the deadline, each waited on (SLOW), nothing ended
    assert slow["kind"] == "slow" and slow["ok"], context
    assert slow["steps_past_deadline"] >= 2 and slow["decisions"].get("wait", 0) >= 1, context
    assert not {"end", "cap"} & set(slow["decisions"]), context
    # the hang: HUNG, ended within hang_s + two looks of the hung step's start
    assert hang["kind"] == "hang" and hang["ok"] and hang["decisions"].get("end") == 1, context
    assert 5.0 - 0.5 <= hang["ended_after_s"] <= 5.0 + 0.5, context
    assert run["false_ends"] == 0 and run["missed_hangs"] == 0, context
    # zero requests lost to the slow window: every failure came with the hang's (genuine) death
    assert run["lost_to_false_death"] == 0, context
    assert run["requests"]["completed"] > 0
    (death,) = run["deaths"]
    assert death["cause"] == "genuine" and death["requests_lost"] == run["requests"]["failed"], context
    assert run["leaked"] == {**run["leaked"], "processes": 0, "shm": 0, "fds": 0}, run["leaked"]
    assert bystander.is_running() and bystander.status() != psutil.STATUS_ZOMBIE, "the bystander was stopped"
    # the table a person reads, with the run's row
    assert "lost to false death" in done.stdout and "guarded" in done.stdout, done.stdout[-2000:]
    assert done.returncode == 0, done.stdout[-3000:]
