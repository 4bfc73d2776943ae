"""In the process that loads the model: dummy weights that keep a deep model's activations alive.

vLLM's ``--load-format dummy`` draws every tensor from U(-1e-3, 1e-3), buffers included.  A
buffer that scales a layer's whole output (Gemma-4's ``layer_scalar``) then shrinks the
residual stream a thousandfold per layer; past a dozen layers it is zero, every token routes
to the same experts, and a step costs less than it would on any checkpoint.  The harness's
engines measure what a step costs, so after a dummy load those buffers get the value that
leaves a layer as it is (``compat.in_worker.NEUTRAL_BUFFERS``).  Installed for the harness's
engines only (its run directory), in the processes vLLM spawns (the engine core, the
workers): the process that builds the engine never loads weights, and importing the loader
there cost ~0.14 s of its start.  A server with real weights never loads dummy ones.
"""

from __future__ import annotations

import functools
import importlib
import multiprocessing
import os
from collections.abc import Callable
from typing import Any

from ..compat import in_worker
from ..contract.names import ENV_DIR


def neutral_buffers(model: Any) -> None:
    """Set every buffer ``compat.in_worker.NEUTRAL_BUFFERS`` names (any module of ``model``) to its value."""
    for module in model.modules():
        for name, value in in_worker.NEUTRAL_BUFFERS.items():
            buffer = module._buffers.get(name)
            if buffer is not None:
                buffer.fill_(value)


def _wrap(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def load_weights(self: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, model, *args, **kwargs)
        neutral_buffers(model)
        return out

    load_weights.__enginedead__ = True  # type: ignore[attr-defined]
    return load_weights


def register() -> None:
    """In a process vLLM spawned for a harness engine: wrap the dummy loader."""
    if os.environ.get(ENV_DIR) and multiprocessing.parent_process() is not None:
        install()


def install() -> bool:
    """Wrap the dummy loader; False when this vLLM has none where ``compat`` says."""
    module_name, class_name, method_name = in_worker.DUMMY_LOADER
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return False
    method = getattr(cls, method_name, None)
    if not callable(method):
        return False
    if not getattr(method, "__enginedead__", False):
        setattr(cls, method_name, _wrap(method))
    return True
