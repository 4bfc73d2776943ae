"""``enginedead probe``: the liveness probe for exec probes; exit 0 alive, 1 not, 2 bad usage.

An exec probe runs every few seconds with a timeout of about one: this command imports
neither pytest nor vLLM.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..harness.probing.exposition import prometheus_text
from ..harness.probing.probe import probe


def main(argv: list[str]) -> int:
    """``enginedead probe [--port N | --pid P]``: exit 0 alive, 1 not, 2 bad usage; one line why."""
    parser = argparse.ArgumentParser(
        prog="enginedead probe",
        description="Liveness probe for a vLLM server whose engine runs the guard (ENGINEDEAD_GUARD=1): "
        "exit 0 while the engine is alive (computing, even past vLLM's deadline, or idle), 1 once its "
        "worker has sat idle inside a step for the guard's hang_s, or a process is gone.  It reads what "
        "the guard writes and never waits on the server.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--port", type=int, default=None,
                       help="the server's listening port (default 8000, vLLM's)")
    where.add_argument("--pid", type=int, default=None, help="the serving process's pid instead")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true",
                       help="print the answer as one JSON object (alive, exit_code, reason, and the step in "
                       "flight: its layer of how many, when it ends at its pace) instead of the line")
    shown.add_argument("--prometheus", action="store_true",
                       help="print the engine's figures as Prometheus text (the families vLLM's /metrics "
                       "serves with the plugin, and enginedead_probe_alive), for a node exporter's textfile "
                       "collector; exit 0 once printed, whatever the answer")
    args = parser.parse_args(argv)
    if args.port is not None and not 0 < args.port < 65536:
        parser.error(f"--port {args.port}: not a TCP port (1-65535)")
    if args.pid is not None and args.pid <= 0:
        parser.error(f"--pid {args.pid}: not a process id")
    if args.prometheus:
        text, _ = prometheus_text(port=args.port, pid=args.pid)
        print(text, end="", flush=True)
        return 0
    answer = probe(port=args.port, pid=args.pid)
    if args.json:
        print(json.dumps(answer.to_dict()), flush=True)
    else:
        print(f"enginedead probe: {answer.reason}", flush=True)
    return answer.exit_code


def add_parser(sub: Any, verbose: bool) -> None:
    """The listing in ``enginedead --help``; ``enginedead probe`` itself parses its own arguments."""
    sub.add_parser("probe", add_help=False,
                   help="liveness probe: exit 0 while the engine is alive (slow included), 1 once it "
                   "hung or died (see `enginedead probe --help`)")


def run(args: argparse.Namespace) -> int:
    """Never reached: ``enginedead probe`` is dispatched before the shared parser (``command.main``)."""
    raise AssertionError("enginedead probe parses its own arguments")
