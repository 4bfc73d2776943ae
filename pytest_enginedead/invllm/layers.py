"""In ``VLLM::Worker``: each layer of a step seen as it begins, from inside vLLM's attention.

Every attention layer computes through its implementation's ``forward`` (``in_worker.attention_layers``),
called from vLLM's attention custom op at run time: in eager mode and inside a compiled graph alike,
for decodes and prefill chunks alike.  Wrapping that method on the implementation's class (once per
class) lets the step recorder note each layer as it begins (``contract.stepprogress``) and run the
faults that live in the layers (a slow step's burn, a hang, a spin).  Inert until ``install``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..compat import in_worker

#: called as each layer begins (the step recorder's ``layer_begins``); None: nothing to note
_on_layer: Callable[[], None] | None = None


def install(worker: Any, on_layer: Callable[[], None]) -> int:
    """Note each attention layer of ``worker``'s model as it begins; the number of layers found
    (0: none, and nothing wrapped)."""
    global _on_layer
    layers = in_worker.attention_layers(worker)
    for impl_class in dict.fromkeys(type(layer.impl) for layer in layers):
        forward = impl_class.forward
        if not getattr(forward, "__enginedead__", False):
            impl_class.forward = _wrap(forward)
    if layers:
        _on_layer = on_layer
    return len(layers)


def _wrap(forward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def attention_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        note = _on_layer
        if note is not None:
            note()
        return forward(self, *args, **kwargs)

    attention_forward.__enginedead__ = True  # type: ignore[attr-defined]
    return attention_forward
