"""pytest-enginedead: catch vLLM engines declared dead while their workers still compute.

The names below are loaded on first use: this package is also imported inside every
vLLM process (its ``vllm.general_plugins`` entry), which needs none of them.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .contract.control import Injection as Injection
    from .contract.decisions import GuardAction as GuardAction
    from .contract.decisions import Verdict as Verdict
    from .contract.steps import StepTime as StepTime
    from .logic.planning.engines import DeadlineAndFaults as DeadlineAndFaults
    from .logic.planning.engines import EngineSpec as EngineSpec
    from .logic.timeouts.policies import Backend as Backend
    from .logic.timeouts.policies import TimeoutPolicy as TimeoutPolicy
    from .pytest_plugin.assertions import assert_no_false_death as assert_no_false_death
    from .pytest_plugin.handles import EngineHandle as EngineHandle
    from .pytest_plugin.handles import ServerHandle as ServerHandle

_WHERE = {
    "assert_no_false_death": "pytest_plugin.assertions",
    "EngineHandle": "pytest_plugin.handles",
    "Verdict": "contract.decisions",
    "GuardAction": "contract.decisions",
    "EngineSpec": "logic.planning.engines",
    "DeadlineAndFaults": "logic.planning.engines",
    "Backend": "logic.timeouts.policies",
    "TimeoutPolicy": "logic.timeouts.policies",
    "Injection": "contract.control",
    "StepTime": "contract.steps",
    "ServerHandle": "pytest_plugin.handles",
}

#: old names kept for downstream code, each with its new one (removed in 0.4.0)
_RENAMED = {"Instructions": "DeadlineAndFaults"}

__all__ = [
    "Backend",
    "DeadlineAndFaults",
    "EngineHandle",
    "EngineSpec",
    "GuardAction",
    "Injection",
    "ServerHandle",
    "StepTime",
    "TimeoutPolicy",
    "Verdict",
    "assert_no_false_death",
]
__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        warnings.warn(f"pytest_enginedead.{name} is deprecated (removed in 0.4.0): it is "
                      f"pytest_enginedead.{_RENAMED[name]}", DeprecationWarning, stacklevel=2)
        name = _RENAMED[name]
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
