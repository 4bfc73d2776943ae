"""A downstream suite's own output after pytest's last line: an atexit handler that prints to
stdout and stderr (the engine tests check that both are still open when it runs)."""

import atexit
import sys


def _said_at_exit():
    print("prints_at_exit: stdout still open", flush=True)
    print("prints_at_exit: stderr still open", file=sys.stderr, flush=True)


atexit.register(_said_at_exit)
