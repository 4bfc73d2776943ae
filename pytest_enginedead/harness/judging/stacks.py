"""Where a worker was: reading faulthandler dumps of ``VLLM::Worker``.

A dump lists each thread's frames, innermost first (``File "...", line N in fn``); the
worker writes ``main-thread 0x…`` before it so that the main thread (the one that runs
the model step) can be picked out.  ``where`` names the model code a step was in: the
deepest function of the model's own modules (``releases.MODEL_CODE``) most of the samples
ran under, with its class and the source lines they were at, and beside it the innermost
frame of vLLM's (or our) code.
"""

from __future__ import annotations

import ast
import functools
import linecache
import re
from collections import Counter
from collections.abc import Sequence

from ...contract.dumps import MAIN_THREAD_PREFIX
from ...logic import releases
from ...logic.reporting.where import ModelFrame, Where, short_path

_FRAME = re.compile(r'^File "(?P<path>.*)", line (?P<line>\d+) in (?P<fn>.*)$')


def innermost_frames(stack: str, frames: int = 10) -> list[str]:
    """The main thread's header and innermost ``frames`` frames from a faulthandler dump.

    The worker writes ``main-thread 0x…`` before each dump; without it, the first
    thread listed is shown.
    """
    lines = stack.splitlines()
    main = next((ln.split()[1] for ln in lines if ln.startswith(MAIN_THREAD_PREFIX)), None)
    blocks: list[list[str]] = []
    for line in lines:
        if line.startswith(("Thread ", "Current thread ")):
            blocks.append([line.strip().rstrip(":")])
        elif blocks and line.strip().startswith("File "):
            blocks[-1].append(line.strip())
    if not blocks:
        return []
    chosen = next((b for b in blocks if main and main in b[0]), blocks[0])
    return chosen[: frames + 1]


def place_of(frames: Sequence[str]) -> str:
    """The innermost function that says where the work is (vLLM's or our code, not torch's).

    ``File "/x/vllm/cpu_moe.py", line 303 in apply`` → ``vllm/cpu_moe.py in apply``.
    """
    useful = [
        f for f in frames[1:] if ("/vllm/" in f or "pytest_enginedead" in f) and "_custom_ops.py" not in f
    ]
    frame = (useful or frames[1:] or ["unknown"])[0]
    match = _FRAME.match(frame)
    return f"{short_path(match['path'])} in {match['fn']}" if match else frame


@functools.lru_cache(maxsize=64)
def _functions(path: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, qualified name) of every function in a source file."""
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        return ()
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, name + ".")

    visit(tree, "")
    return tuple(found)


def _qualname(path: str, line: int) -> str | None:
    """The innermost function around ``line`` of ``path``, with its class: ``Cls.method``."""
    around = [f for f in _functions(path) if f[0] <= line <= f[1]]
    return max(around, key=lambda f: f[0])[2] if around else None


#: the model function named is the deepest one at least this share of the samples ran under:
#: the layer, not one of its blocks that happens to hold just over half of them
MOST_SAMPLES = 0.75


def model_frames(frames: Sequence[str]) -> list[ModelFrame]:
    """Every frame in the model's own modules, innermost first."""
    found = []
    for frame in frames[1:]:
        match = _FRAME.match(frame)
        if match and releases.MODEL_CODE in match["path"]:
            path, line = match["path"], int(match["line"])
            source = linecache.getline(path, line).strip()
            found.append(ModelFrame(path, line, _qualname(path, line) or match["fn"], source))
    return found


def where(stack: str, source: str, samples: Sequence[str] = ()) -> Where | None:
    """Where the main thread was: over ``samples`` (``record.sample_block``s) and ``stack``.

    The model function named is the deepest one three quarters of the samples ran under
    (for a transformer: its decoder layer's ``forward``), with the lines of it they were at,
    commonest first (its MoE block, its MLP, its attention): a profile of where the step
    spends its time, which one sample, or one box's proportions, cannot give.  The
    innermost frame is the commonest among the samples at the commonest line.  None for a
    stack with no frames.
    """
    blocks = _frame_blocks(stack, samples)
    if not blocks:
        return None
    seen = [(model_frames(b), place_of(b)) for b in blocks]
    inside = [(fs, place) for fs, place in seen if fs]
    if not inside:
        top, count = Counter(place for _, place in seen).most_common(1)[0]
        return Where(None, top, source, count, len(blocks))
    chosen = _deepest_common_function([fs for fs, _ in inside])
    at = _frames_in(chosen, inside)
    shares = _line_shares([f for f, _ in at])
    top_line = shares[0][0].line
    innermost = Counter(place for f, place in at if f.line == top_line).most_common(1)[0][0]
    return Where(shares[0][0], innermost, source, len(at), len(blocks), shares)


def _frame_blocks(stack: str, samples: Sequence[str]) -> list[list[str]]:
    """Each sample's frames and the dump's main thread's, each after a header line; those
    with no frames left out."""
    blocks = [["sample"] + [ln.strip() for ln in b.splitlines() if ln.strip().startswith("File ")]
              for b in samples]
    blocks.append(innermost_frames(stack, frames=10_000))
    return [b for b in blocks if len(b) > 1]


def _deepest_common_function(stacks: Sequence[Sequence[ModelFrame]]) -> tuple[str, str]:
    """The model function (path, qualname) to name over ``stacks`` (each innermost first):
    the deepest (by its median depth) of those at least ``MOST_SAMPLES`` of them ran under,
    or the commonest when none is that common; ties go to the commoner."""
    # each sample's model functions, outermost first: (path, qualname) -> its depth there
    depths: list[dict[tuple[str, str], int]] = []
    for fs in stacks:
        chain: dict[tuple[str, str], int] = {}
        for depth, f in enumerate(reversed(fs)):
            chain[(f.path, f.qualname)] = depth  # a recursion keeps its innermost call
        depths.append(chain)
    presence = Counter(key for chain in depths for key in chain)
    most = [k for k, n in presence.items() if n >= MOST_SAMPLES * len(stacks)]
    most = most or [presence.most_common(1)[0][0]]

    def median_depth(key: tuple[str, str]) -> int:
        found = sorted(chain[key] for chain in depths if key in chain)
        return found[(len(found) - 1) // 2]

    return max(most, key=lambda k: (median_depth(k), presence[k]))


def _frames_in(
    function: tuple[str, str], seen: Sequence[tuple[Sequence[ModelFrame], str]]
) -> list[tuple[ModelFrame, str]]:
    """For each sample that ran under ``function`` (path, qualname): its innermost frame in
    it, with the sample's innermost place."""
    at = []
    for fs, place in seen:
        frame = next((f for f in fs if (f.path, f.qualname) == function), None)
        if frame is not None:
            at.append((frame, place))
    return at


def _line_shares(frames: Sequence[ModelFrame]) -> tuple[tuple[ModelFrame, int], ...]:
    """The lines ``frames`` (one function's, one per sample) were at, commonest first, each
    as its first frame seen with the number of samples there."""
    lines = Counter(f.line for f in frames)
    first: dict[int, ModelFrame] = {}
    for f in frames:
        first.setdefault(f.line, f)
    return tuple((first[line], n) for line, n in lines.most_common())
