"""The ``enginedead`` console script: ``probe`` without the harness's imports, the rest in ``cli``.

An exec probe runs every few seconds with a timeout of about one: it must not pay
for importing pytest.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["probe"]:
        from .commands.probe import main as probe_main

        return probe_main(args[1:])
    from .commands.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
