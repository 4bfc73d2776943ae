"""A guard policy pytest can import and VLLM::EngineCore cannot: its directory is on pytest's
sys.path only while this conftest imports it, so neither the sys.path the engine core gets
from pytest when it starts nor the harness's guard path holds it."""

import sys
from pathlib import Path

HIDDEN = str(Path(__file__).parent / "pytest_only")
sys.path.insert(0, HIDDEN)
import edhidden  # noqa: E402, F401

sys.path.remove(HIDDEN)
