"""Values as users give them (flags, ini keys, variables, command arguments): parsed and checked.

Each parser raises ``BadValue`` with a message that says what is wrong with the value;
the input it came through (pytest's options, a command's flags) adds where it came from.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_BATCH_SIZES = (8, 64)


class BadValue(ValueError):
    """A value that does not parse; the message says what is wrong with it."""


def parse_batch_sizes(raw: str) -> tuple[int, ...]:
    """``"8,64"`` → ``(8, 64)``: positive integers, no empty items."""
    text = raw.strip()
    if not text:
        raise BadValue("no batch sizes given; use a comma list like 8,64")
    sizes = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise BadValue(f"empty item in {raw!r}; use a comma list like 8,64")
        try:
            n = int(item)
        except ValueError:
            raise BadValue(f"{item!r} is not a whole number; use a comma list like 8,64") from None
        if n < 1:
            raise BadValue(f"batch size {n} must be at least 1")
        sizes.append(n)
    return tuple(dict.fromkeys(sizes))


def check_batch_sizes(values: tuple[Any, ...]) -> tuple[int, ...]:
    """Marker arguments: positive ints."""
    if not values:
        raise BadValue("needs at least one batch size")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BadValue(f"batch size {v!r} is not a positive integer")
    return tuple(dict.fromkeys(values))


def expand_path(text: str) -> Path:
    """``~`` and ``~user`` expanded; a path the OS cannot take is a BadValue."""
    if "\0" in text:
        raise BadValue(f"{text!r} contains a NUL byte")
    try:
        return Path(text).expanduser()
    except RuntimeError:  # ~user that does not exist, or no home directory
        head = text.split(os.sep, 1)[0]
        raise BadValue(f"{text!r} cannot be expanded: no home directory for {head!r}") from None


def path_exists(path: Path) -> bool:
    """Whether ``path`` exists; a path the OS refuses to look up (too long, a loop) is a BadValue."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        shown = str(path) if len(str(path)) <= 80 else str(path)[:60] + "..."
        raise BadValue(f"{shown!r} cannot be used: {exc.strerror or exc}") from None
    return True


def validate_output_path(raw: str) -> str:
    """An output path as text: not empty, ``~`` expanded, within the lengths the OS takes.

    Whether it can take the output is proven when it is claimed (``outputs.claim``),
    at the start of the run, by creating it for real.
    """
    text = raw.strip()
    if not text:
        raise BadValue("no path given")
    path = expand_path(text)
    if len(os.fsencode(path.name)) > 255:
        raise BadValue(f"{path.name[:40]!r}... is too long a file name (at most 255 bytes)")
    if len(os.fsencode(str(path.absolute()))) >= 4096:
        raise BadValue(f"{str(path)[:40]!r}... is too long a path (at most 4095 bytes)")
    return str(path)


#: the busy threshold's largest value: a share of one core, so 64 means 64 cores at work
MAX_BUSY_THRESHOLD = 64


def parse_fraction(raw: str) -> float:
    """``"0.05"`` or ``"5%"`` → 0.05 (share of one core)."""
    text = raw.strip()
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise BadValue(f"{raw!r} is not a number; use a share of one core like 0.05 or 5%") from None
    if not 0 < value <= MAX_BUSY_THRESHOLD:
        raise BadValue(
            f"{raw!r} must be above 0 and at most {MAX_BUSY_THRESHOLD} "
            "(a share of one core, like 0.05 or 5%; 64 = 64 cores busy)"
        )
    return value


def parse_switch(raw: str) -> bool:
    """``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``."""
    text = raw.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise BadValue(f"{raw!r} is not a switch; use 1 or 0")


#: the liveness sampler's shortest and longest interval: below a millisecond it spins a core
#: (sampling every engine process's CPU time back to back); above a minute it sees nothing
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.001, 60.0


def parse_seconds(raw: str) -> float:
    """Seconds between liveness samples: from ``MIN_INTERVAL_S`` to ``MAX_INTERVAL_S``."""
    try:
        value = float(raw.strip())
    except ValueError:
        raise BadValue(f"{raw!r} is not a number of seconds") from None
    if not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
        raise BadValue(
            f"{raw!r} must be at least {MIN_INTERVAL_S:g} (1 ms: shorter spins a core sampling) and at most "
            f"{MAX_INTERVAL_S:g} seconds"
        )
    return value


#: more shards than this is a typo, not a CI matrix
MAX_SHARDS = 1000


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``, counted from 1 (``--enginedead-shard 1/2``)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(raw: str) -> Shard:
    """``"1/2"`` → ``Shard(1, 2)``: shard K of N, whole numbers, 1 <= K <= N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", raw)
    if match is None:
        raise BadValue(f"{raw!r} is not K/N; use e.g. 1/2 for the first of two shards")
    k, n = int(match[1]), int(match[2])
    if not 1 <= n <= MAX_SHARDS:
        raise BadValue(f"{raw!r}: the number of shards must be from 1 to {MAX_SHARDS}")
    if not 1 <= k <= n:
        raise BadValue(f"{raw!r}: there is no shard {k} of {n}; K runs from 1 to {n}")
    return Shard(k, n)


#: the most ranks one engine may have here (vLLM's CPU backend: one worker process per rank)
MAX_RANKS = 64


def _count(raw: str, most: int, what: str) -> int:
    """A whole number from 1 to ``most``; ``what`` says in the error what it counts."""
    text = raw.strip()
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise BadValue(f"{raw!r} is not a number of {what}")
    return int(text)


def parse_ranks(raw: str) -> int:
    """``"2"`` -> 2: ranks of an engine (tensor parallel), a whole number from 1."""
    return _count(raw, MAX_RANKS, f"ranks from 1 to {MAX_RANKS} (one worker process each)")


#: the most nodes one engine may span here (each a process tree of its own)
MAX_NODES = 16


def parse_nodes(raw: str) -> int:
    """``"2"`` -> 2: the nodes an engine's ranks spread over (vLLM's ``--nnodes``), from 1."""
    return _count(raw, MAX_NODES, f"nodes from 1 to {MAX_NODES} (vLLM's --nnodes)")


def validate_input_path(raw: str) -> str:
    """An input file's path as text: not empty, ``~`` expanded (read when it is used)."""
    text = raw.strip()
    if not text:
        raise BadValue("no path given")
    return str(expand_path(text))


def parse_policy(raw: str) -> str:
    """A policy spec as given: ``reference``, ``vllm-stock`` or ``module:attr`` (loaded later)."""
    text = raw.strip()
    if not text:
        raise BadValue("no policy given; use reference, vllm-stock or module:attr")
    return text


#: a one-line message longer than this has its long paths cut to their head and tail (``-v``: whole)
SHOWN_LINE_CHARS = 200

#: ... each path (or name) longer than this, in such a line
SHOWN_PATH_CHARS = 70

#: what a message holds a path as: a run of characters with no space or quote in it
_TOKEN = re.compile(r"[^\s'\"]+")

SHORTENED_NOTE = " [long paths shortened; -v shows them whole]"


def shorten_paths(message: str, limit: int = SHOWN_PATH_CHARS, line: int = SHOWN_LINE_CHARS) -> str:
    """``message``, if longer than ``line``, with every path longer than ``limit`` cut.

    The tail is kept longer than the head: it names the file the message is about
    (``.../models/m/config.json``).  A note at the end says how to see them whole.
    """
    if len(message) <= line:
        return message
    head = limit // 3

    def cut(match: re.Match[str]) -> str:
        text = match.group(0)
        return text if len(text) <= limit else f"{text[:head]}...{text[-(limit - head - 3):]}"

    shortened = _TOKEN.sub(cut, message)
    return shortened if shortened == message else shortened + SHORTENED_NOTE


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``: how user code's exceptions are reported."""
    lines = str(exc).strip().splitlines()
    text = lines[0] + (" ..." if len(lines) > 1 else "") if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
