"""The bad-input conventions' own machinery: an engine's first import is refused in the processes
that ``no_child_engine`` arms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.processes
def test_an_engine_import_is_refused_in_subprocesses(no_child_engine: Path) -> None:
    """Control: a subprocess carries the refusal, and it refuses the module an engine start
    imports first (``from vllm import LLM`` is ``vllm.entrypoints.llm``), recording it."""
    probe = "import sys; sys.meta_path[0].find_spec('vllm.entrypoints.llm')"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode != 0 and "refused: vllm.entrypoints.llm" in done.stderr, done.stderr[-2000:]
    assert "vllm.entrypoints.llm" in no_child_engine.read_text()
    no_child_engine.unlink()  # seen: the fixture's own check is for the runs that must not start one
