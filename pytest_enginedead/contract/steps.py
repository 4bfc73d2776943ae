"""The step record: what ``VLLM::Worker`` writes around each step, and how it is read.

The step record, ``steps-<pid>.jsonl``, is one JSON object per line, each appended
with a single ``write``: ``{"e": "b", "i": 3, "n": 64, "k": 64, "c": 8192, "w": 8192,
"r": 8192, "rw": 8192, "t": 1234.5}`` begins step 3 with batch 64 at
``time.monotonic()`` 1234.5; it schedules 64 tokens whose queries attend 8192 keys in
all (``w``: with each query's keys capped at the sliding window; -1 where unknown);
its sequences read 8192 keys from the KV cache (``r``: each sequence's context once,
however many of its tokens attend it; ``rw``: capped at the window its tokens see);
``e`` ends it.  V1 steps have
a second RPC, ``sample_tokens``, recorded as the same step's ``sb`` / ``se`` phase.
Both sides take the file names, keys and line templates from here.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

KEY_EVENT, KEY_STEP, KEY_BATCH, KEY_TIME = "e", "i", "n", "t"

#: what the step scheduled: tokens, keys attended (summed over its tokens), the same capped at the window
KEY_TOKENS, KEY_CONTEXT, KEY_WINDOW_CONTEXT = "k", "c", "w"
#: keys its sequences read from the KV cache (each sequence's context once), the same within the window
KEY_READ, KEY_WINDOW_READ = "r", "rw"
#: what a begin line says of the step's shape, in ``StepTime``'s order
SHAPE_KEYS = (KEY_TOKENS, KEY_CONTEXT, KEY_WINDOW_CONTEXT, KEY_READ, KEY_WINDOW_READ)

BEGIN, END, SAMPLE_BEGIN, SAMPLE_END = "b", "e", "sb", "se"

# byte templates: the worker formats one line with ``%`` per record, no json.dumps
BEGIN_LINE = (
    b'{"%s":"%s","%s":%%d,"%s":%%d,"%s":%%.6f}\n'
    % (KEY_EVENT.encode(), BEGIN.encode(), KEY_STEP.encode(), KEY_BATCH.encode(), KEY_TIME.encode())
)

#: the begin line with what the step scheduled (step, batch, tokens, context, window context, keys read,
#: keys read within the window, time)
BEGIN_SHAPE_LINE = (
    b'{"%s":"%s","%s":%%d,"%s":%%d,"%s":%%d,"%s":%%d,"%s":%%d,"%s":%%d,"%s":%%d,"%s":%%.6f}\n'
    % (KEY_EVENT.encode(), BEGIN.encode(), KEY_STEP.encode(), KEY_BATCH.encode(), KEY_TOKENS.encode(),
       KEY_CONTEXT.encode(), KEY_WINDOW_CONTEXT.encode(), KEY_READ.encode(), KEY_WINDOW_READ.encode(),
       KEY_TIME.encode())
)


def attended_keys(first: int, last: int, window: int | None = None) -> int:
    """What the record's context counts: keys attended by queries that see ``first``..``last``
    keys each (a chunk's tokens, in order), each capped at ``window`` if given."""
    if last < first:
        return 0
    if window is None or last <= window:
        return (first + last) * (last - first + 1) // 2
    if first >= window:
        return window * (last - first + 1)
    return (first + window) * (window - first + 1) // 2 + window * (last - window)


def read_keys(context: int, new: int = 1, window: int | None = None) -> int:
    """What the record's keys read count for one sequence at ``context`` keys after its step, ``new``
    of them scheduled in it: its whole context, or within a window what its tokens see
    (``window - 1`` keys before its first new token, and the new ones)."""
    if window is None:
        return context
    return min(context, window - 1 + new)


def _phase_line(event: str) -> bytes:
    return b'{"%s":"%s","%s":%%d,"%s":%%.6f}\n' % (
        KEY_EVENT.encode(), event.encode(), KEY_STEP.encode(), KEY_TIME.encode()
    )


END_LINE = _phase_line(END)

#: the key of the layers the step's forward pass was seen to go through (its end line; -1: not seen)
KEY_LAYERS = "l"

#: the end line with the layers seen (step, time, layers)
END_LAYERS_LINE = (
    b'{"%s":"%s","%s":%%d,"%s":%%.6f,"%s":%%d}\n'
    % (KEY_EVENT.encode(), END.encode(), KEY_STEP.encode(), KEY_TIME.encode(), KEY_LAYERS.encode())
)

SAMPLE_BEGIN_LINE = _phase_line(SAMPLE_BEGIN)

SAMPLE_END_LINE = _phase_line(SAMPLE_END)


def steps_path(run_dir: str, pid: int) -> str:
    """The step record one worker process writes."""
    return os.path.join(run_dir, f"steps-{pid}.jsonl")


@dataclass(frozen=True)
class StepTime:
    """One step as the worker saw it; ``seconds`` is None while it runs."""

    step: int
    batch_size: int
    started: float  # time.monotonic() in the worker (a system-wide clock)
    seconds: float | None
    pid: int
    #: what vLLM scheduled (None where the record does not say): tokens, and the keys
    #: their queries attend, summed; the same with each capped at the sliding window
    tokens: int | None = None
    context_tokens: int | None = None
    window_context_tokens: int | None = None
    #: keys its sequences read from the KV cache (each sequence's context once); within the window
    read_tokens: int | None = None
    window_read_tokens: int | None = None
    #: the layers its forward pass was seen to go through (None: not seen, or it still runs)
    layers: int | None = None

    @property
    def running(self) -> bool:
        return self.seconds is None


def parse_steps(lines: Iterable[str], pid: int) -> list[StepTime]:
    """Steps from record lines; a step's time is ``execute_model`` plus ``sample_tokens``.

    A step is running while either phase is.  A torn last line (being written) is
    skipped.
    """
    times: dict[int, dict[str, float]] = {}
    batch: dict[int, int] = {}
    shape: dict[int, tuple[int | None, ...]] = {}
    layers: dict[int, int | None] = {}
    for line in lines:
        try:
            rec = json.loads(line)
            event, step, t = rec[KEY_EVENT], int(rec[KEY_STEP]), float(rec[KEY_TIME])
        except (ValueError, KeyError, TypeError):
            continue
        times.setdefault(step, {})[event] = t
        if event == BEGIN:
            batch[step] = int(rec.get(KEY_BATCH, 0))
            shape[step] = tuple(_count(rec, k) for k in SHAPE_KEYS)
        elif event == END:
            layers[step] = _count(rec, KEY_LAYERS)
    steps = []
    for i, at in sorted(times.items()):
        if BEGIN not in at:
            continue
        running = END not in at or (SAMPLE_BEGIN in at and SAMPLE_END not in at)
        seconds = None
        if not running:
            seconds = at[END] - at[BEGIN]
            if SAMPLE_BEGIN in at:
                seconds += at[SAMPLE_END] - at[SAMPLE_BEGIN]
        found = StepTime(i, batch[i], at[BEGIN], seconds, pid, *shape[i])
        steps.append(replace(found, layers=layers[i]) if layers.get(i) is not None else found)
    return steps


def one_per_step(steps: Iterable[StepTime]) -> list[StepTime]:
    """Each finished step once, as long as its slowest rank took, in the order recorded; a step
    still running is kept as it is.

    Every rank of a tensor-parallel engine records every step: its own process, the same step
    number and shape.  The step took as long as its slowest rank, which the others wait for in
    each all-reduce; counted once per rank, a step weighs as two and two near-equal times halve
    the spread of like steps.  A record is another rank's view of a step when its process
    differs and its step number and shape are the same.
    """
    out: list[StepTime] = []
    seen: dict[tuple[int | None, ...], tuple[int, set[int]]] = {}  # -> its place in out, the pids seen
    for s in steps:
        if s.seconds is None:
            out.append(s)
            continue
        key = (s.step, s.batch_size, s.tokens, s.context_tokens, s.window_context_tokens, s.read_tokens,
               s.window_read_tokens)
        found = seen.get(key)
        if found is not None and s.pid not in found[1]:  # another rank's view of a step kept
            at, pids = found
            out[at] = replace(out[at], seconds=max(out[at].seconds or 0.0, s.seconds))
        else:
            at, pids = len(out), set()
            out.append(s)
        pids.add(s.pid)
        seen[key] = (at, pids)
    return out


def _count(rec: Mapping[str, Any], key: str) -> int | None:
    """A count the record may lack (older writers) or mark unknown (-1)."""
    value = rec.get(key)
    return value if isinstance(value, int) and value >= 0 else None


def read_steps(path: str, pid: int) -> list[StepTime]:
    """One worker's step record (empty if it has written none)."""
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        return parse_steps(f, pid)
    return []


def whole_lines_after(path: str, offset: int) -> bytes:
    """The whole lines a step record holds past ``offset`` (a line still being written waits for
    the next look); empty if the record is not there.  The caller moves its offset by the length."""
    with contextlib.suppress(OSError), open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
        return data[:data.rfind(b"\n") + 1]
    return b""


@dataclass(frozen=True)
class StepStats:
    """Finished steps: count, median and longest, and the largest batch seen.

    ``max_running``: the longest is a step still running (cut short by a deadline),
    measured up to the moment of the summary.
    """

    steps: int
    p50_s: float | None
    max_s: float | None
    max_running: bool
    max_batch: int


def summarize(steps: Iterable[StepTime], now: float | None = None) -> StepStats:
    """Count, p50 and max of finished steps; given ``now``, a running step counts too."""
    steps = list(steps)
    done = [s.seconds for s in steps if s.seconds is not None]
    longest = max(done) if done else None
    running = False
    if now is not None:
        for s in steps:
            if s.seconds is None and (longest is None or now - s.started > longest):
                longest, running = now - s.started, True
    return StepStats(
        steps=len(done),
        p50_s=statistics.median(done) if done else None,
        max_s=longest,
        max_running=running,
        max_batch=max((s.batch_size for s in steps), default=0),
    )


def worst_by_batch(steps: Iterable[StepTime]) -> dict[int, float]:
    """The longest finished step per batch size (what ``headroom`` is judged on)."""
    worst: dict[int, float] = {}
    for s in steps:
        if s.seconds is not None:
            worst[s.batch_size] = max(worst.get(s.batch_size, 0.0), s.seconds)
    return worst
