"""Where a worker was when its step outlived the deadline: the model code and the innermost frame.

Read from its stacks by ``harness.judging.stacks``; kept in a death's record
(``logic.reporting.deaths``) and written to the report as ``to_dict`` says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: the lines of the model function a ``where:`` line lists
SHOWN_SHARES = 3


def short_path(path: str) -> str:
    """``/site/vllm/model_executor/x.py`` → ``vllm/model_executor/x.py`` (from the package on)."""
    for package in ("/vllm/", "/pytest_enginedead/"):
        at = path.rfind(package)
        if at >= 0:
            return path[at + 1 :]
    return path


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


@dataclass(frozen=True)
class Where:
    """Where the worker was: the model function most samples ran under, the lines of it they
    were at (the model code named is the commonest), and the innermost frame there."""

    model: ModelFrame | None
    innermost: str
    #: how the stack was taken: "the worker's own stack at the deadline (...)", or after
    source: str
    #: how many of the samples were in ``model``'s function (without model code: at ``innermost``)
    count: int = 1
    total: int = 1
    #: the lines of ``model``'s function the samples were at, commonest first, with their counts
    shares: tuple[tuple[ModelFrame, int], ...] = ()

    def describe(self) -> str:
        if self.model is None:
            share = f" in {self.count} of {self.total} samples" if self.total > 1 else ""
            return f"{self.innermost}{share} (no model code on the stack); {self.source}"
        if self.total == 1:
            return f"{self.model.describe()}; innermost {self.innermost}; {self.source}"
        m = self.model
        lines = ", ".join(
            f":{f.line} {f.source or f.qualname} in {n}" for f, n in self.shares[:SHOWN_SHARES]
        )
        left = len(self.shares) - SHOWN_SHARES
        more = f", {left} more line{'s' if left > 1 else ''}" if left > 0 else ""
        return (
            f"{m.qualname} ({short_path(m.path)}) in {self.count} of {self.total} samples, at "
            f"{lines}{more}; innermost {self.innermost}; {self.source}"
        )

    def to_dict(self) -> dict[str, object]:
        model = self.model
        return {
            "model": None if model is None else {
                "qualname": model.qualname, "path": short_path(model.path), "line": model.line,
                "source": model.source,
            },
            "innermost": self.innermost,
            "source": self.source,
            "samples": self.total,
            "samples_here": self.count,
            "lines": [{"line": f.line, "source": f.source, "samples": n} for f, n in self.shares],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Where:
        """A place as ``to_dict`` wrote it (the model's path is the short one it keeps)."""
        model = data.get("model")
        frame = None if model is None else ModelFrame(
            str(model["path"]), int(model["line"]), str(model["qualname"]), str(model["source"]))
        shares = tuple(
            (ModelFrame(frame.path if frame else "", int(ln["line"]), frame.qualname if frame else "",
                        str(ln["source"])), int(ln["samples"]))
            for ln in data.get("lines") or ())
        return cls(frame, str(data["innermost"]), str(data["source"]), int(data["samples_here"]),
                   int(data["samples"]), shares)
