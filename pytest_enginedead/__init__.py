"""pytest-enginedead: catch vLLM engines declared dead while their workers still compute.

The names below are loaded on first use: this package is also imported inside every
vLLM process (its ``vllm.general_plugins`` entry), which needs none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .assertions import assert_no_false_death as assert_no_false_death
    from .engine import EngineHandle as EngineHandle
    from .liveness import Verdict as Verdict
    from .planning import EngineSpec as EngineSpec
    from .planning import Instructions as Instructions
    from .policy import Backend as Backend
    from .policy import TimeoutPolicy as TimeoutPolicy
    from .record import Injection as Injection
    from .record import StepTime as StepTime
    from .server import ServerHandle as ServerHandle

_WHERE = {
    "assert_no_false_death": "assertions",
    "EngineHandle": "engine",
    "Verdict": "liveness",
    "EngineSpec": "planning",
    "Instructions": "planning",
    "Backend": "policy",
    "TimeoutPolicy": "policy",
    "Injection": "record",
    "StepTime": "record",
    "ServerHandle": "server",
}

__all__ = [
    "Backend",
    "EngineHandle",
    "EngineSpec",
    "Injection",
    "Instructions",
    "ServerHandle",
    "StepTime",
    "TimeoutPolicy",
    "Verdict",
    "assert_no_false_death",
]
__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
