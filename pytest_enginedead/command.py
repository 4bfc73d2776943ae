"""The ``enginedead`` console script: one parser over the commands, each in ``commands/``.

``enginedead probes`` is ``enginedead probe-settings`` now (the old name is taken, with a line
that says so): one letter apart from ``enginedead probe``, it read as the same command.

``enginedead probe`` parses its own arguments and is dispatched first: an exec probe runs
every few seconds with a timeout of about one.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

from .commands import calibrate, check, doctor, merge, models, probe, probe_settings
from .commands.common import Parser, Refused, refused, verbose_in
from .compat import versions

DESCRIPTION = "Catch vLLM engines declared dead while their workers are still computing."
EPILOG = ("Start with `enginedead doctor`; `enginedead COMMAND --help` says what each command prints, "
          "its exit status and the variables it reads.")
#: in the order ``enginedead --help`` lists them
COMMANDS = {"doctor": doctor, "check": check, "calibrate": calibrate, "probe": probe,
            "probe-settings": probe_settings, "merge": merge, "models": models}
#: old spellings still taken, each with a line on stderr that names the new one
RENAMED = {"probes": "probe-settings"}


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
    """This distribution's version, from its metadata (the package's root would load the pytest side)."""
    try:
        return importlib.metadata.version("pytest-enginedead")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] and args[0] in RENAMED:
        print(f"enginedead: `enginedead {args[0]}` is now `enginedead {RENAMED[args[0]]}` (the old name goes "
              "in 0.4.0)", file=sys.stderr, flush=True)
        args[0] = RENAMED[args[0]]
    if args[:1] == ["probe"]:
        return probe.main(args[1:])
    parsed = build_parser(verbose_in(args)).parse_args(args)
    try:
        return int(COMMANDS[parsed.command].run(parsed))
    except Refused as exc:
        return refused(parsed, exc)


if __name__ == "__main__":
    raise SystemExit(main())
