"""Every function within a cyclomatic complexity of 15 by radon's count (the lint gate's second count).

    python tools/complexity.py [--max 15] PATH [PATH ...]

ruff's C901 counts as mccabe does; radon also counts boolean operators and comprehensions, so a
function can pass ruff at 15 and measure 26 here.  Prints each function over the limit (path:line,
name, count) and exits 1 when there is one; 0 otherwise.  Needs radon (the lint env has it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from radon.complexity import cc_visit  # type: ignore[import-untyped]


def sources(paths: Sequence[str]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def over(paths: Sequence[str], limit: int) -> list[tuple[str, int, str, int]]:
    """(path, line, name, complexity) of every function and method above ``limit``."""
    found = []
    for path in sources(paths):
        for block in cc_visit(path.read_text()):
            for item in [block, *getattr(block, "methods", []), *getattr(block, "closures", [])]:
                if item.complexity > limit:
                    found.append((str(path), item.lineno, item.fullname, item.complexity))
    return sorted(set(found), key=lambda f: (-f[3], f[0], f[1]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/complexity.py", description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=15, help="the largest complexity allowed (15)")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    found = over(args.paths, args.max)
    for path, line, name, count in found:
        print(f"{path}:{line}: {name} has complexity {count} (radon), over {args.max}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
