"""What an operator's supervisor sees: the enginedead probe on two servers, and exit statuses.

Two real servers on one machine, both guarded (``hang_s`` 3 s): one SLOW (64
clients, each step busy 3.2 s past a 2 s deadline), one HUNG (its worker idles
inside step 2 under a 30 s deadline, with ``ENGINEDEAD_EXIT_ON_DEATH=1``).  Each
probe, pointed at its server's port, must find its own: alive all through the slow
steps and before ``hang_s`` of the hang (the traffic starts once each probe has answered), not
alive in a probe begun within ``hang_s`` and a round of probing of the hang.
The hung server then exits with ``EXIT_HUNG``.  The slow server is made with explicit
arguments, an extra keyword among them (``vllm_server_factory``'s own test, on a server started
here anyway).  Without the opt-in a server exits 0 (vLLM's own behaviour; the server suite's
false death shows it); an unguarded false death with it exits ``EXIT_DEAD`` (the short server
suite, ``server_false_death``, run with the opt-in by tests/engine/test_server.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_enginedead.contract.names import EXIT_ENV, EXIT_HUNG

#: the probe's period here, as in an exec probe with periodSeconds 0.5
PERIOD_S = 0.5
HANG_S = 3.0


class Prober(threading.Thread):
    """Runs ``enginedead probe --port PORT`` every ``PERIOD_S`` until stopped."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.results: list[tuple[float, float, int, str]] = []  # start, wall, exit, line
        self.halt = threading.Event()

    def run(self) -> None:
        cmd = [sys.executable, "-m", "pytest_enginedead.command", "probe", "--port", str(self.port)]
        while not self.halt.is_set():
            t0 = time.monotonic()
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            wall = time.monotonic() - t0
            self.results.append((t0, wall, out.returncode, (out.stdout + out.stderr).strip()))
            self.halt.wait(max(0.0, PERIOD_S - wall))


def until(done, limit_s: float, every_s: float) -> bool:
    """Whether ``done()`` came true within ``limit_s``, asked every ``every_s``."""
    deadline = time.monotonic() + limit_s
    while not done() and time.monotonic() < deadline:
        time.sleep(every_s)
    return done()


@pytest.mark.enginedead_guard(hang_s=HANG_S)
def test_the_probe_tells_slow_from_hung_on_two_servers(vllm_server_factory, monkeypatch):
    # explicit arguments; an extra keyword becomes the server's --flag (--max-model-len 256)
    slow = vllm_server_factory(64, timeout_s=2, inject={"slow_s_per_seq": 0.05}, max_model_len=256)
    assert slow.timeout_s == 2 and slow.batch_size == 64
    monkeypatch.setenv(EXIT_ENV, "1")
    hung = vllm_server_factory(8, timeout_s=30, inject={"hang_at_step": 2})
    probers = {"slow": Prober(slow.port), "hung": Prober(hung.port)}
    for p in probers.values():
        p.start()
    # the traffic begins once each probe has answered (its first run imports cold): the hung server's
    # probes before hang_s are then never none, however long a probe takes on this machine
    assert until(lambda: all(p.results for p in probers.values()), 60.0, 0.1), \
        {name: p.results for name, p in probers.items()}
    outcome = {}

    def drive(name, server, n):
        try:
            outcome[name] = server.complete(n, max_tokens=4)
        except Exception as exc:  # the hung server's clients: its engine dies
            outcome[name] = exc

    clients = [threading.Thread(target=drive, args=("slow", slow, 64)),
               threading.Thread(target=drive, args=("hung", hung, 8))]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    until(lambda: hung.exit_code is not None, 30.0, 0.2)
    code = hung.exit_code
    time.sleep(2 * PERIOD_S)
    for p in probers.values():
        p.halt.set()
        p.join()

    # the slow server: every client answered, every step ran past the deadline, the probe said alive
    answered = outcome["slow"]
    assert isinstance(answered, list) and [len(t) for t in answered] == [4] * 64, answered
    assert slow.health() == 200 and slow.exit_code is None
    long = [s for s in slow.step_times() if s.seconds is not None and s.seconds > 2]
    assert long, slow.step_times()
    first, last = min(s.started for s in long), max(s.started + s.seconds for s in long)
    assert last - first >= 3 * 2, (first, last)  # slow for at least 3 x the stock deadline
    during = [r for r in probers["slow"].results if first <= r[0] <= last]
    assert during and all(r[2] == 0 for r in during), during
    assert any("alive, computing" in r[3] for r in during), during

    # the hung server: alive until hang_s, not alive soon after
    assert isinstance(outcome["hung"], Exception), outcome["hung"]
    (stuck,) = [s for s in hung.step_times() if s.running]
    results = probers["hung"].results
    before = [r for r in results if r[0] + r[1] < stuck.started + HANG_S - PERIOD_S]
    assert before and all(r[2] == 0 for r in before), before
    failed = [r for r in results if r[2] != 0]
    assert failed, results
    # the probe that found it began within hang_s and one round of probing (a round is the
    # period, or a probe's own wall where that is longer: the machine's, not this box's)
    began, found_after = failed[0][0] - stuck.started, failed[0][0] + failed[0][1] - stuck.started
    round_s = max(PERIOD_S, *(r[1] for r in results))
    assert began <= HANG_S + round_s + PERIOD_S, (began, round_s, failed[0])
    assert code == EXIT_HUNG, (code, Path(hung.log_path).read_text()[-3000:])
    walls = [r[1] for p in probers.values() for r in p.results]
    print(f"\nprobe: {len(walls)} probes, wall max {max(walls):.3f} s, median "
          f"{sorted(walls)[len(walls) // 2]:.3f} s; hang found {found_after:.2f} s after it began "
          f"(hang_s {HANG_S:g}); first failing line: {failed[0][3]}")
