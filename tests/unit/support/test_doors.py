"""The bad-input conventions' own machinery: the import tripwire fires in the processes it arms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_tripwire_is_armed_in_subprocesses(wired: Path) -> None:
    """Control: a subprocess carries the wire, and it fires on the module an engine start
    imports first (``from vllm import LLM`` is ``vllm.entrypoints.llm``), recording it."""
    probe = "import sys; sys.meta_path[0].find_spec('vllm.entrypoints.llm')"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode != 0 and "tripwire: vllm.entrypoints.llm" in done.stderr, done.stderr[-2000:]
    assert "vllm.entrypoints.llm" in wired.read_text()
    wired.unlink()  # seen: the fixture's own check is for the runs that must not start one
