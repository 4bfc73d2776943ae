"""What every ``enginedead`` command shares: its parser's manners, its output paths, its checks.

Everything checkable is checked before any engine starts; a bad argument is one line and
exit 2.  pytest's output and vLLM's logs go to a log file named at the end (and to the
terminal with ``-v``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from ..harness import outputs
from ..harness.outputs import Output
from ..harness.waiting import Progress
from ..logic import releases
from ..logic.inputs.modelconfig import BUNDLED_MODEL, validate_model
from ..logic.inputs.optiontable import OPTIONS
from ..logic.inputs.values import BadValue, parse_batch_sizes, parse_policy, parse_ranks, shorten_paths
from ..logic.planning.ranks import BIND_ENV, cores_problem


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), not the whole usage.

    Long paths in it keep their head and tail, unless ``-v`` asks for them whole.
    """

    verbose = False

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {shown(message, self.verbose)}\n")


def shown(message: str, verbose: bool) -> str:
    return message if verbose else shorten_paths(message)


def verbose_in(argv: Sequence[str]) -> bool:
    """``-v`` among the command's own arguments (those after ``--`` are pytest's)."""
    own = list(argv)[: list(argv).index("--")] if "--" in argv else argv
    return any(a in ("-v", "--verbose") for a in own)


class Refused(Exception):
    """An input that cannot work, found before any engine starts; the message says which."""


#: the plugin's guard switch (``ENGINEDEAD_GUARD``): the commands refuse a value the plugin refuses
GUARD_SWITCH = ("enginedead_guard",)


def check_environment_options(names: Sequence[str]) -> None:
    """The plugin's options among ``names`` that the environment sets, parsed as the plugin parses
    them: a value it would refuse is refused here, in its words (``pytest_plugin.options.resolve``)."""
    for opt in OPTIONS:
        raw = os.environ.get(opt.env)
        if opt.name in names and raw is not None:
            try:
                opt.parse(raw)
            except BadValue as exc:
                raise Refused(f"{opt.env}={raw!r} (from environment): {exc}") from None


def arg(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Turn our option parsers' BadValue into argparse's one-line error."""

    def convert(raw: str) -> Any:
        try:
            return parse(raw)
        except BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def number(
    parse: Callable[[str], Any], minimum: float, what: str, hint: str,
    maximum: float | None = None, max_why: str = "",
) -> Callable[[str], Any]:
    """A numeric argument type: parsed with ``parse``, at least ``minimum`` (at most ``maximum``)."""

    def convert(raw: str) -> Any:
        try:
            value = parse(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not {what}{hint}") from None
        if not (value >= minimum and math.isfinite(value)) or (minimum == 0 and value == 0):
            bound = "above 0" if minimum == 0 else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(f"{raw!r} must be {bound}{hint}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{raw!r} must be at most {maximum:.15g}{max_why or hint}")
        return value

    return convert


headroom = number(float, 0, "a number", " (a multiple of the step time, e.g. 3)")

positive_int = number(int, 1, "a whole number", "")

deadline = number(int, 1, "a whole number of seconds",
                  " (vLLM's deadline is whole seconds, at least 1)", maximum=releases.MAX_DEADLINE_S,
                  max_why=" s, the longest wait vLLM can make (Python's threading.TIMEOUT_MAX)")


def policy(raw: str) -> str:
    """A policy spec; loading it (user code) waits for ``preflight``, after vLLM's environment."""
    try:
        return parse_policy(raw)
    except BadValue as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_engine_flags(p: argparse.ArgumentParser, sizes: tuple[int, ...] | None, what: str = "") -> None:
    """--model, --batch-sizes, --log, -v: the flags of the commands that start engines."""
    p.add_argument("--model", type=arg(validate_model), default=BUNDLED_MODEL, metavar="DIR",
                   help="model directory (config.json is enough); default: the bundled tiny Llama")
    p.add_argument("--batch-sizes", type=arg(parse_batch_sizes), default=sizes, metavar="N,N",
                   help=what or f"comma list of batch sizes (default {','.join(map(str, sizes or ()))})")
    p.add_argument("--log", metavar="PATH",
                   help="where pytest's output and vLLM's logs go (default: a file in the temp dir)")
    add_verbose(p)


def add_ranks(p: argparse.ArgumentParser) -> None:
    """``--tensor-parallel-size``: the ranks of every engine the command starts."""
    p.add_argument("--tensor-parallel-size", type=arg(parse_ranks), default=1, metavar="N",
                   help="vLLM's flag: ranks per engine, one worker process each, bound to their own cores "
                   "unless VLLM_CPU_OMP_THREADS_BIND is set (default 1)")


def check_ranks(args: argparse.Namespace) -> None:
    """Each rank gets a core of those this command may use (unless the user binds them)."""
    ranks = getattr(args, "tensor_parallel_size", 1)
    if ranks > 1 and BIND_ENV not in os.environ:
        problem = cores_problem(sorted(os.sched_getaffinity(0)), ranks, "this command")
        if problem:
            raise Refused(f"--tensor-parallel-size {ranks}: {problem}")


def add_verbose(p: argparse.ArgumentParser) -> None:
    """``-v``: the same meaning in every command."""
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show what the command hides: long paths in errors whole, and pytest's output and "
                   "vLLM's logs on the terminal (commands that start engines)")


#: the command's output flags, in the order they are claimed (``args`` attribute, flag)
OUTPUT_FLAGS = (("log", "--log"), ("report", "--report"), ("plot", "--plot"))


def claim_outputs(args: argparse.Namespace) -> dict[str, Output]:
    """Every output path the command line names, claimed (created for real) before anything runs,
    and the log in the temp dir when ``--log`` names none.

    Two flags naming the same file are refused; so is any path that cannot take its output.
    """
    claimed: dict[str, Output] = {}
    try:
        for dest, flag in OUTPUT_FLAGS:
            raw = getattr(args, dest, None)
            if raw is not None:
                claimed[dest] = outputs.claim(raw, f"{flag} {raw!r}", claimed.values())
        if "log" not in claimed:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            path = os.path.join(tempfile.gettempdir(), f"enginedead-{args.command}-{stamp}-{os.getpid()}.log")
            claimed["log"] = outputs.claim(path, f"the log {path!r} (set TMPDIR, or give --log)")
    except outputs.OutputError as exc:
        release(claimed)
        raise Refused(str(exc)) from None
    return claimed


def release(claimed: dict[str, Output]) -> None:
    for out in claimed.values():
        out.close()


def say(message: str) -> None:
    print(message, flush=True)


@contextlib.contextmanager
def output_to(log_out: Output, verbose: bool) -> Iterator[Progress]:
    """fd-level: vLLM and its processes write to fds 1 and 2; keep both for the log.

    Yields a writer for progress lines, which still reach the terminal.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    log = log_out.open()
    saved_out, saved_err = os.dup(1), os.dup(2)
    log_fd = log.fileno()
    if not verbose:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)

    def progress(message: str, done: bool = False) -> None:
        os.write(saved_err, f"enginedead: {message}\n".encode())

    try:
        yield progress
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        for fd in (saved_out, saved_err):
            os.close(fd)
        log.close()


def run_claimed(
    args: argparse.Namespace,
    claimed: dict[str, Output],
    run: Callable[[argparse.Namespace, dict[str, Output]], int],
) -> int:
    """``run`` with the outputs claimed; a log that stopped taking output since is exit 2."""
    try:
        return run(args, claimed)
    except outputs.OutputError as exc:
        print(f"enginedead {args.command}: error: {shown(str(exc), args.verbose)}", file=sys.stderr)
        return 2
    finally:
        release(claimed)


def refused(args: argparse.Namespace, exc: Exception) -> int:
    """A refusal: one line on stderr, exit 2."""
    print(f"enginedead {args.command}: error: {shown(str(exc), args.verbose)}", file=sys.stderr)
    return 2
