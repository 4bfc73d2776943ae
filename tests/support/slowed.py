"""Run a command on a deliberately slowed machine: ``python tests/support/slowed.py -- CMD ...``.

A busy loop pinned to the last allowed core keeps that core's share of time at about
half for anything else scheduled there (under ``-n 2`` one xdist worker's engines run
there at half speed), for as long as the command runs; it is stopped by pid afterwards,
also when the command fails or is interrupted.  ``make test-slow`` runs the engine suite
this way: the tests size their batches and deadlines from steps measured in the same run,
so they must hold on the slowed core too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

HOG = "while True:\n    pass\n"


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: python tests/support/slowed.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    core = max(os.sched_getaffinity(0))
    hog = subprocess.Popen([sys.executable, "-c", HOG], preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    print(f"slowed: a busy loop (pid {hog.pid}) holds core {core} while the command runs", flush=True)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130
    finally:
        hog.send_signal(signal.SIGKILL)
        hog.wait()
        print(f"slowed: busy loop (pid {hog.pid}) stopped", flush=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
