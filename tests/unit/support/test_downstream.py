"""The downstream runner's own promises (``tests/support/downstream.py``).

A run it starts to be cut short gets Ctrl-C's default action, whatever it inherited: a suite
launched as ``cmd &`` from a script (a non-interactive shell, no job control) inherits SIGINT
ignored, and the Ctrl-C table (``tests/engine/test_cut_short.py``) would press a Ctrl-C nobody
hears.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: a process whose SIGINT is ignored starts a run through ``Downstream.start`` and says, for
#: itself and for the run, whether SIGINT is ignored (``SigIgn`` in /proc/PID/status)
STARTS_A_RUN = """
import os, signal, sys
from pathlib import Path

import pytest
from types import SimpleNamespace

import pytest

from tests.support.downstream import Downstream


def ignores_sigint(pid):
    [mask] = [ln.split()[1] for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
              if ln.startswith("SigIgn:")]
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


repo = Downstream(SimpleNamespace(path=Path(sys.argv[1])))
run = repo.start()
try:
    print(ignores_sigint(os.getpid()), ignores_sigint(run.proc.pid))
finally:
    repo.close()
"""


@pytest.mark.processes
def test_a_run_started_from_a_background_job_hears_ctrl_c(tmp_path: Path) -> None:
    """``bash -c 'python ... & wait'``: the background job ignores SIGINT (POSIX), as a suite run
    from a script does; the run it starts through ``Downstream.start`` does not."""
    (tmp_path / "test_sleeps.py").write_text("import time\n\n\ndef test_sleeps():\n    time.sleep(60)\n")
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        ["bash", "-c", '"$0" -c "$1" "$2" & wait $!', sys.executable, STARTS_A_RUN, str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    job, run = done.stdout.split()
    assert job == "True"  # the control: the background job itself ignores SIGINT
    assert run == "False", (tmp_path / "pytest.log").read_text()[-3000:]
