"""``enginedead merge``: one verdict table from many reports (shards, releases, machines)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from typing import Any

from ..harness import outputs
from ..logic.reporting import merging
from .common import Refused, add_verbose, refused


def add_parser(sub: Any, verbose: bool) -> None:
    mer = sub.add_parser("merge", help="one verdict table from many reports (shards, releases, machines)",
                         description="Merge the JSON reports of shards (--enginedead-shard), vLLM "
                         "releases and machines into one verdict table; step figures of different machines "
                         "stay apart.  Exit 1 when a false death happened under the policy or the guard, "
                         "or a shard is missing.",
                         epilog="exit status: 0 no false death under the policy or the guard and no shard "
                         "missing; 1 a false death under the policy or the guard, or a missing shard; 2 a "
                         "report it cannot read or a path it cannot write (nothing written).")
    mer.verbose = verbose
    mer.add_argument("reports", nargs="+", metavar="REPORT",
                     help="reports written by --enginedead-report or `enginedead check --report`")
    mer.add_argument("--junitxml", metavar="PATH", help="also write the merged table as JUnit XML here")
    mer.add_argument("--json", action="store_true", help="print the merge as JSON")
    add_verbose(mer)


def run(args: argparse.Namespace) -> int:
    try:
        return run_merge(args)
    except (Refused, outputs.OutputError) as exc:
        return refused(args, exc)


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    with contextlib.suppress(OSError):
        return os.path.samefile(a, b)
    return False


def run_merge(args: argparse.Namespace) -> int:
    """Read every report first (a bad one: exit 2, nothing written), then the table; exit 1 on a problem."""
    try:
        loaded = [merging.load(path) for path in args.reports]
        merged = merging.merge(loaded)
    except merging.MergeError as exc:
        raise Refused(str(exc)) from None
    junit = None
    if args.junitxml is not None:
        try:
            junit = outputs.claim(args.junitxml, f"--junitxml {args.junitxml!r}")
        except outputs.OutputError as exc:
            raise Refused(str(exc)) from None
        if any(_same_file(p, junit.target) for p in args.reports):
            junit.close()
            raise Refused(
                f"--junitxml {args.junitxml!r} names one of the reports to merge; give another path"
            )
    try:
        if args.json:
            print(json.dumps(merging.to_json(merged), indent=2, default=str))
        else:
            print(merging.table(merged))
            print(merging.summary(merged))
        if junit is not None:
            junit.write_text(merging.junit_xml(merged))
    finally:
        if junit is not None:
            junit.close()
    return 1 if merged.problems else 0
