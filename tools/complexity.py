"""Every function within a cyclomatic complexity of 15 by radon's count (the lint gate's second count).

    python tools/complexity.py [--max 15] [--except PATH ...] PATH [PATH ...]

ruff's C901 counts as mccabe does; radon also counts boolean operators and comprehensions, so a
function can pass ruff at 15 and measure 26 here.  Prints each function over the limit (path:line,
name, count) and exits 1 when there is one; 0 otherwise.  ``--except PATH`` (repeatable) leaves a
file out: one whose split lands with another change.  Needs radon (the lint env has it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from radon.complexity import cc_visit  # type: ignore[import-untyped]


def sources(paths: Sequence[str], excepted: Sequence[str] = ()) -> Iterator[Path]:
    """The Python files under ``paths``, but those in ``excepted``."""
    left_out = {Path(p).resolve() for p in excepted}
    for raw in paths:
        path = Path(raw)
        found = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        yield from (f for f in found if f.resolve() not in left_out)


def over(paths: Sequence[str], limit: int, excepted: Sequence[str] = ()) -> list[tuple[str, int, str, int]]:
    """(path, line, name, complexity) of every function and method above ``limit``."""
    found = []
    for path in sources(paths, excepted):
        for block in cc_visit(path.read_text()):
            for item in [block, *getattr(block, "methods", []), *getattr(block, "closures", [])]:
                if item.complexity > limit:
                    found.append((str(path), item.lineno, item.fullname, item.complexity))
    return sorted(set(found), key=lambda f: (-f[3], f[0], f[1]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/complexity.py", description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=15, help="the largest complexity allowed (15)")
    parser.add_argument("--except", dest="excepted", action="append", default=[], metavar="PATH",
                        help="a file to leave out (repeatable)")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    missing = [p for p in args.excepted if not Path(p).is_file()]
    if missing:
        parser.error(f"--except {missing[0]}: no such file")
    found = over(args.paths, args.max, args.excepted)
    for path, line, name, count in found:
        print(f"{path}:{line}: {name} has complexity {count} (radon), over {args.max}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
