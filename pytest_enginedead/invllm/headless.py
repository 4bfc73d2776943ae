"""Kept for the documented command line, deprecated, removed in 0.4.0:
``python -m pytest_enginedead.invllm.headless ARGS`` is now
``python -m pytest_enginedead.vllm_plugin.headless ARGS``."""

from __future__ import annotations

import sys

from ..vllm_plugin.headless import main

if __name__ == "__main__":
    print("pytest_enginedead.invllm.headless is deprecated (removed in 0.4.0): run "
          "python -m pytest_enginedead.vllm_plugin.headless", file=sys.stderr, flush=True)
    sys.exit(main(sys.argv[1:]))
