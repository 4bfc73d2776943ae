"""Where a worker was: reading faulthandler dumps of ``VLLM::Worker``.

A dump lists each thread's frames, innermost first (``File "...", line N in fn``); the
worker writes ``main-thread 0x…`` before it so that the main thread (the one that runs
the model step) can be picked out.  ``where`` names the model code a step was in: the
deepest frame inside the model's own modules (``compat.MODEL_CODE``), with its class
and source line, and beside it the innermost frame of vLLM's (or our) code.
"""

from __future__ import annotations

import ast
import functools
import linecache
import re
from collections.abc import Sequence
from dataclasses import dataclass

from . import compat
from .record import MAIN_THREAD_PREFIX

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


def short_path(path: str) -> str:
    """``/site/vllm/model_executor/x.py`` → ``vllm/model_executor/x.py`` (from the package on)."""
    for package in ("/vllm/", "/pytest_enginedead/"):
        at = path.rfind(package)
        if at >= 0:
            return path[at + 1 :]
    return path


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


@dataclass(frozen=True)
class ModelFrame:
    """The deepest frame inside the model's own code: which class's method, which line."""

    path: str
    line: int
    qualname: str  # ``Gemma4DecoderLayer.forward``
    source: str  # that line of the source, stripped ('' when unreadable)

    def describe(self) -> str:
        text = f"{self.qualname} ({short_path(self.path)}:{self.line})"
        return f"{text}: {self.source}" if self.source else text


def model_frame(frames: Sequence[str]) -> ModelFrame | None:
    """The innermost frame in the model's own modules (``compat.MODEL_CODE``), or None."""
    for frame in frames[1:]:
        match = _FRAME.match(frame)
        if match and compat.MODEL_CODE in match["path"]:
            path, line = match["path"], int(match["line"])
            source = linecache.getline(path, line).strip()
            return ModelFrame(path, line, _qualname(path, line) or match["fn"], source)
    return None


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


@dataclass(frozen=True)
class Where:
    """Where the worker was, from one stack: the model code and the innermost frame."""

    model: ModelFrame | None
    innermost: str
    #: how the stack was taken: "the worker's own stack at the deadline (...)", or after
    source: str

    def describe(self) -> str:
        if self.model is None:
            return f"{self.innermost} (no model code on the stack); {self.source}"
        return f"{self.model.describe()}; innermost {self.innermost}; {self.source}"

    def to_dict(self) -> dict[str, object]:
        model = self.model
        return {
            "model": None if model is None else {
                "qualname": model.qualname, "path": short_path(model.path), "line": model.line,
                "source": model.source,
            },
            "innermost": self.innermost,
            "source": self.source,
        }


def where(stack: str, source: str) -> Where | None:
    """Where the main thread of ``stack`` was, or None for a dump with no frames."""
    frames = innermost_frames(stack, frames=10_000)
    if len(frames) < 2:
        return None
    return Where(model_frame(frames), place_of(frames), source)
