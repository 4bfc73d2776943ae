"""pytest-enginedead: catch vLLM engines declared dead while their workers still compute."""

from .assertions import assert_no_false_death
from .engine import EngineHandle
from .liveness import Verdict
from .planning import EngineSpec
from .policy import Backend, TimeoutPolicy
from .record import Injection, StepTime

__all__ = [
    "Backend",
    "EngineHandle",
    "EngineSpec",
    "Injection",
    "StepTime",
    "TimeoutPolicy",
    "Verdict",
    "assert_no_false_death",
]
__version__ = "0.1.0"
