"""The ``enginedead`` console script: one parser over the commands, each in ``commands/``.

``enginedead probe`` parses its own arguments and is dispatched first: an exec probe runs
every few seconds with a timeout of about one.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

from .commands import calibrate, check, doctor, merge, models, probe, probes
from .commands.common import Parser, Refused, refused, verbose_in
from .compat import versions

DESCRIPTION = "Catch vLLM engines declared dead while their workers are still computing."
EPILOG = ("Start with `enginedead doctor`; `enginedead COMMAND --help` says what each command prints, "
          "its exit status and the variables it reads.")
#: in the order ``enginedead --help`` lists them
COMMANDS = {"doctor": doctor, "check": check, "calibrate": calibrate, "probe": probe, "probes": probes,
            "merge": merge, "models": models}


def build_parser(verbose: bool = False) -> argparse.ArgumentParser:
    parser = Parser(prog="enginedead", description=DESCRIPTION, epilog=EPILOG)
    parser.verbose = verbose
    vllm = versions.installed_version() or "not installed"
    parser.add_argument("--version", action="version",
                        version=f"enginedead (pytest-enginedead) {_version()}; vLLM {vllm}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS.values():
        module.add_parser(sub, verbose)
    return parser


def _version() -> str:
    """This distribution's version, from its metadata (the package's root would load the face)."""
    try:
        return importlib.metadata.version("pytest-enginedead")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["probe"]:
        return probe.main(args[1:])
    parsed = build_parser(verbose_in(args)).parse_args(args)
    try:
        return int(COMMANDS[parsed.command].run(parsed))
    except Refused as exc:
        return refused(parsed, exc)


if __name__ == "__main__":
    raise SystemExit(main())
