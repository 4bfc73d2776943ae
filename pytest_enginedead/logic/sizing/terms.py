"""What one engine step is, and what each term of the step model multiplies.

A step is what the scheduler put in it (``Step``): sequences, tokens, the keys its
queries attend and the keys its sequences read, full and within the sliding window.
Its time is modelled as

    fixed + per_seq x seqs + per_token x tokens + per_expert x experts touched
          + per_context_token x keys attended   (full-attention layers)
          + per_window_context_token x keys attended   (sliding-window layers)
          + per_read_token x keys read   (full-attention layers)
          + per_window_read_token x keys read   (sliding-window layers)

``experts touched`` is a mixture of experts' own term (``Routing``): each token picks
``k`` of ``E`` experts in every MoE layer, and a step reads the weights of every expert
one of its tokens picked.  With routing spread evenly, ``T`` tokens reach
``E x (1 - (1 - k/E)^T)`` distinct experts per layer: 8 of 32 for one decode (k = 8),
~29 for 8, all 32 from ~32 on.  A line through tokens cannot follow that bend: a decode
of 8 reads almost four times the expert weights of a decode of 1, a prefill chunk of 2,048
no more than a decode of 32.  Routing that favours some experts (a trained router) reaches
fewer, so the term is an upper bound there: the forecast errs long, the safe side.

Pure: no vLLM, the features from the step's numbers and the model's config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: every term the model knows, in the order they are printed
TERMS = ("fixed", "per_seq", "per_token", "per_expert", "per_context_token", "per_window_context_token",
         "per_read_token", "per_window_read_token")

#: what each term multiplies, for people
TERM_UNITS = {
    "fixed": "s per step",
    "per_seq": "s per scheduled sequence",
    "per_token": "s per scheduled token",
    "per_expert": "s per expert its tokens reach, in each MoE layer",
    "per_context_token": "s per context token attended (full-attention layers)",
    "per_window_context_token": "s per context token attended (sliding-window layers)",
    "per_read_token": "s per context token read, once per sequence (full-attention layers)",
    "per_window_read_token": "s per context token read, once per sequence (sliding-window layers)",
}


@dataclass(frozen=True)
class Step:
    """What one engine step scheduled.

    ``context_tokens``: keys attended, summed over the step's tokens (a decode at
    context 500 attends 500; a 100-token chunk after 400 computed tokens attends
    401 + ... + 500).  ``window_context_tokens``: the same with each token's keys
    capped at the sliding window (equal to ``context_tokens`` without a window).
    """

    seqs: int
    tokens: int
    context_tokens: int
    window_context_tokens: int | None = None
    #: keys its sequences read from the KV cache, each sequence's context once (a decode at
    #: context 500 reads 500, as it attends; a 100-token chunk after 400 reads 500 for all its
    #: 100 queries); the same within the window.  None: as attended (a record that does not say)
    read_tokens: int | None = None
    window_read_tokens: int | None = None

    @property
    def window_context(self) -> int:
        return self.context_tokens if self.window_context_tokens is None else self.window_context_tokens

    @property
    def read(self) -> int:
        return self.context_tokens if self.read_tokens is None else self.read_tokens

    @property
    def window_read(self) -> int:
        if self.window_read_tokens is not None:
            return self.window_read_tokens
        if self.read_tokens is not None:
            return self.read_tokens
        return self.window_context

    def describe(self) -> str:
        text = f"{self.seqs} seqs, {self.tokens} tokens, {self.context_tokens:,} context tokens"
        if self.window_context_tokens is not None and self.window_context_tokens != self.context_tokens:
            text += f" ({self.window_context_tokens:,} in the window)"
        return text

    def as_dict(self) -> dict[str, int | None]:
        return {
            "seqs": self.seqs,
            "tokens": self.tokens,
            "context_tokens": self.context_tokens,
            "window_context_tokens": self.window_context_tokens,
            "read_tokens": self.read_tokens,
            "window_read_tokens": self.window_read_tokens,
        }


@dataclass(frozen=True)
class Routing:
    """A mixture of experts' routing: ``experts`` per MoE layer, ``per_token`` picked by each token,
    in ``layers`` of the model's layers."""

    experts: int
    per_token: int
    layers: int = 1

    def touched(self, tokens: float) -> float:
        """Distinct experts ``tokens`` routed tokens reach in one layer, expected under even routing."""
        if tokens <= 0:
            return 0.0
        missed: float = (1.0 - min(self.per_token, self.experts) / self.experts) ** tokens
        return self.experts * (1.0 - missed)

    def describe(self) -> str:
        return f"{self.experts} experts, {self.per_token} per token, in {self.layers} layers"

    def as_dict(self) -> dict[str, int]:
        return {"experts": self.experts, "per_token": self.per_token, "layers": self.layers}


def _whole(text: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def expert_count(text: Mapping[str, Any]) -> int:
    """Experts per MoE layer in a (text) config; 0 for a dense model (or a MoE block switched off)."""
    if text.get("enable_moe_block") is False:
        return 0
    return _whole(text, "num_experts", "num_local_experts", "n_routed_experts")


def experts_per_token(text: Mapping[str, Any]) -> int:
    return _whole(text, "top_k_experts", "num_experts_per_tok", "moe_top_k") or 1


def routing_of(text: Mapping[str, Any], depth: int) -> Routing | None:
    """The routing of a (text) config with ``depth`` layers, None for a dense model.  DeepSeek-style
    configs keep their first ``first_k_dense_replace`` layers dense."""
    experts = expert_count(text)
    if not experts:
        return None
    dense = min(depth, _whole(text, "first_k_dense_replace"))
    layers = depth - dense
    return Routing(experts, experts_per_token(text), layers) if layers > 0 else None


def feature(step: Step, term: str, routing: Routing | None = None) -> float:
    """What ``term`` multiplies in ``step``; ``per_expert`` is the experts reached in all MoE layers."""
    if term == "fixed":
        return 1.0
    if term == "per_expert":
        return 0.0 if routing is None else routing.layers * routing.touched(step.tokens)
    return float(_COUNTS[term](step))


_COUNTS: dict[str, Callable[[Step], int]] = {
    "per_seq": lambda s: s.seqs,
    "per_token": lambda s: s.tokens,
    "per_context_token": lambda s: s.context_tokens,
    "per_window_context_token": lambda s: s.window_context,
    "per_read_token": lambda s: s.read,
    "per_window_read_token": lambda s: s.window_read,
}


def features(step: Step, terms: Sequence[str], routing: Routing | None = None) -> list[float]:
    return [feature(step, t, routing) for t in terms]
