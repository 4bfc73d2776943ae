"""How far a worker's step has gone: written by ``VLLM::Worker`` at every layer, read by the judge.

Each worker process maps one small file once (``enginedead-layers-<pid>``, in the engine's run
directory or the guard's state directory) and rewrites it in place, with no system call, as its
step moves: the step begins (``PREPARE``: inputs, a compile), each layer's attention begins
(``FORWARD``: layer k of n), the forward pass ends, sampling runs (``SAMPLE``), the step ends
(``IDLE``).  Its clock is ``time.monotonic()``, which every process on one machine shares.

A reader may read while the worker writes: the record begins with a sequence count that the
writer makes odd before it writes and even after (a seqlock), and a reader retries until it reads
the same even count before and after the fields.

The worker also keeps its **pace**: the longest time between two advances inside the layers (from
one layer to the next, or from the last layer to the end of the forward pass) this step may take at
its run's pace — the longest gap seen in the run so far in steps of its size, or carried up in
proportion from smaller steps when it schedules more tokens than any seen (a prefill chunk after
decodes: a layer's work grows with its tokens; the estimate errs long) — ``expected_gap_s``. How
long a step may go without advancing before it is judged stalled is sized from it
(``contract.judge``), never from one box's seconds.
"""

from __future__ import annotations

import contextlib
import enum
import mmap
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

#: one progress file per worker process, beside its collective mark
LAYERS_PREFIX = "enginedead-layers-"

# seq, step, phase, layer, layers, forward_done, began, forward_at, advanced, pace_s, tail
_FORMAT = "<qqqqqqddddd"
_SIZE = struct.calcsize(_FORMAT)
_SEQ = struct.Struct("<q")


class Phase(enum.IntEnum):
    """Where a worker's step is."""

    IDLE = 0  # between steps
    PREPARE = 1  # the step began, no layer yet: its inputs, a compile, a fault before the model
    FORWARD = 2  # inside the model's layers, or after its last one until the forward pass returns
    SAMPLE = 3  # sampling the next tokens (the step's second RPC)

    @property
    def word(self) -> str:
        return _WORDS[self]


_WORDS = {
    Phase.IDLE: "between steps",
    Phase.PREPARE: "preparing its step (no layer yet)",
    Phase.FORWARD: "in its layers",
    Phase.SAMPLE: "sampling",
}


@dataclass(frozen=True)
class StepProgress:
    """One worker's step as its progress record shows it."""

    step: int  # the worker's own count of its steps (its step record's)
    phase: Phase
    #: layers begun in this step: while ``FORWARD``, layer ``layer`` of ``layers`` runs and
    #: ``layer - 1`` are finished; once the forward pass has returned, all are
    layer: int
    layers: int  # attention layers of the model on this rank (0: not known, no layer hook)
    began: float  # when the step began
    forward_at: float  # when its first layer began (0.0 before)
    advanced: float  # the last time it advanced: a layer began, the forward pass ended, a phase began
    pace_s: float  # the longest gap between two advances this step may take (the run's pace, to its size)
    forward_done: bool = False  # the forward pass has returned (its layers are all finished)
    #: the last finished step's time from its last layer's start to its forward pass's end, in
    #: that step's layers: the last layer and what follows it (the final norm, the logits)
    tail: float = 1.0

    @property
    def in_step(self) -> bool:
        return self.phase is not Phase.IDLE

    @property
    def finished_layers(self) -> int:
        """Layers of this step that are finished."""
        if self.forward_done:
            return self.layers or self.layer
        return max(0, self.layer - 1)

    def stalled_s(self, now: float) -> float:
        """How long since the step last advanced."""
        return max(0.0, now - self.advanced)

    def per_layer_s(self) -> float | None:
        """This step's time per layer so far, from its finished layers (None before one finished)."""
        done = self.finished_layers
        if self.phase is not Phase.FORWARD or done < 1 or not self.forward_at:
            return None
        return (self.advanced - self.forward_at) / done

    def ends_in_s(self, now: float) -> float | None:
        """How long this step's forward pass has still to run, at this step's pace so far: None
        before a layer finished, or without the model's layer count."""
        per_layer = self.per_layer_s()
        if per_layer is None or not self.layers or self.forward_done:
            return None
        left = max(0, self.layers - self.finished_layers)
        if left == 0:
            return 0.0
        return max(0.0, (left - 1 + self.tail) * per_layer - self.stalled_s(now))

    def where(self) -> str:
        """``layer 17 of 30``-style: where the step is, in words."""
        if self.phase is not Phase.FORWARD:
            return self.phase.word
        if self.forward_done:
            return f"after its last layer ({self.layers or self.layer} of {self.layers or self.layer})"
        of = f" of {self.layers}" if self.layers else ""
        return f"layer {self.layer}{of}"


def layers_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{LAYERS_PREFIX}{pid}")


def layers_pid(name: str) -> int | None:
    """The worker's pid in a progress file's name, or None if it is not one."""
    digits = name[len(LAYERS_PREFIX):] if name.startswith(LAYERS_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def size_class(tokens: int) -> int:
    """Steps of like size (their tokens within a factor of two) share a class; 0: size not known."""
    return max(0, tokens).bit_length()


def expected_gap_s(longest: Mapping[int, tuple[float, int]], tokens: int) -> float:
    """The longest gap between two advances a step of ``tokens`` may take, from the run's longest per
    size class (``longest``: class -> the longest gap seen, the tokens of its step).  From the nearest
    class at or below this step's, in proportion to the tokens (a prefill chunk after decodes: a
    layer's work grows with its tokens; the estimate errs long); a step smaller than any seen takes
    the nearest class above as it is; a step of unknown size, the run's longest."""
    if not longest:
        return 0.0
    if tokens <= 0:
        return max(gap for gap, _ in longest.values())
    mine = size_class(tokens)
    below = [c for c in longest if 0 < c <= mine]
    if below:
        gap, seen = longest[max(below)]
        return gap * max(1.0, tokens / seen)
    return longest[min(c for c in longest if c > mine or c == 0)][0]


class ProgressWriter:
    """The worker's side: one mapped record, rewritten in place as its step moves (one writer)."""

    def __init__(self, directory: str, layers: int = 0) -> None:
        self.path = layers_path(directory, os.getpid())
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)  # the mapping keeps the file; no descriptor stays open
        self._seq = 0
        self.layers = layers
        self.step = 0
        self.phase = Phase.IDLE
        self.layer = 0
        self.began = self.forward_at = self.advanced = 0.0
        self.pace_s = 0.0
        self.forward_done = False
        self.tail = 1.0
        self._tokens = 0  # the running step's scheduled tokens (0: not known)
        #: per size class of step (``size_class``): the longest gap seen in the run, its step's tokens
        self._longest: dict[int, tuple[float, int]] = {}
        self._write()

    def begin_step(self, step: int, now: float, tokens: int = 0) -> None:
        """Step ``step`` begins, scheduling ``tokens`` (0: not known): its pace is the run's, to its size."""
        self.step, self.phase, self.layer, self.forward_done = step, Phase.PREPARE, 0, False
        self.began = self.advanced = now
        self.forward_at = 0.0
        self._tokens = max(0, tokens)
        self.pace_s = expected_gap_s(self._longest, self._tokens)
        self._write()

    def _gap(self, gap_s: float) -> None:
        """A gap between two advances of the running step, seen: the step's pace, the run's longest."""
        self.pace_s = max(self.pace_s, gap_s)
        mine = size_class(self._tokens)
        if gap_s > self._longest.get(mine, (0.0, 0))[0]:
            self._longest[mine] = (gap_s, self._tokens)

    def layer_begins(self, now: float) -> None:
        """A layer's attention begins: the layer before it is finished."""
        if self.phase is not Phase.FORWARD:
            self.phase, self.forward_at = Phase.FORWARD, now
        else:
            self._gap(now - self.advanced)
        self.layer += 1
        self.advanced = now
        self._write()

    def forward_ends(self, now: float) -> None:
        """The forward pass returned: its last layer is finished."""
        if self.phase is Phase.FORWARD and not self.forward_done:
            last = now - self.advanced
            self._gap(last)
            if self.layer >= 2 and self.advanced > self.forward_at:
                self.tail = last / ((self.advanced - self.forward_at) / (self.layer - 1))
            self.forward_done, self.advanced = True, now
            self._write()

    def phase_begins(self, phase: Phase, now: float) -> None:
        """Sampling begins, or the step ends (``IDLE``)."""
        self.phase, self.advanced = phase, now
        self._write()

    def snapshot(self) -> StepProgress:
        """The record as this writer last wrote it (its own process reads no map)."""
        return StepProgress(self.step, self.phase, self.layer, self.layers, self.began, self.forward_at,
                            self.advanced, self.pace_s, self.forward_done, self.tail)

    def _write(self) -> None:
        self._seq += 1  # odd: being written
        _SEQ.pack_into(self._map, 0, self._seq)
        struct.pack_into(_FORMAT, self._map, 0, self._seq, self.step, int(self.phase), self.layer,
                         self.layers, int(self.forward_done), self.began, self.forward_at, self.advanced,
                         self.pace_s, self.tail)
        self._seq += 1  # even: whole
        _SEQ.pack_into(self._map, 0, self._seq)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.remove(self.path)


def read_step_progress(directory: str | None, pid: int, tries: int = 50) -> StepProgress | None:
    """Worker ``pid``'s progress as it stands (None if it keeps none: no layer hook, an older plugin,
    a rank on another machine)."""
    if not directory:
        return None
    try:
        with open(layers_path(directory, pid), "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    with mapped:
        if len(mapped) < _SIZE:
            return None
        for _ in range(tries):
            fields = struct.unpack_from(_FORMAT, mapped, 0)
            (after,) = _SEQ.unpack_from(mapped, 0)
            if fields[0] % 2 == 0 and after == fields[0]:
                _, step, phase, layer, layers, done, began, forward_at, advanced, pace, tail = fields
                if phase not in set(Phase):
                    return None
                return StepProgress(step, Phase(phase), layer, layers, began, forward_at, advanced, pace,
                                    bool(done), tail)
    return None
