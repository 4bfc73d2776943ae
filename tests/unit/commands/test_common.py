"""The ``enginedead`` commands' parser manners without engines: a bad argument is one line, exit 2.

(The regression check and a real calibration run in ``tests/engine/test_commands.py``.)
"""

from __future__ import annotations

import pytest

from tests.support.downstream import enginedead


@pytest.mark.processes
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check", "--batch-sizes", "abc"], "argument --batch-sizes: 'abc' is not a whole number"),
        (["check", "--batch-sizes", "0"], "argument --batch-sizes: batch size 0 must be at least 1"),
        (
            ["check", "--model", "/no/such/dir"],
            "argument --model: model directory '/no/such/dir' does not exist",
        ),
        (
            ["check", "--policy", "nosuch_mod:attr"],
            "enginedead check: error: --policy 'nosuch_mod:attr': no module named 'nosuch_mod'",
        ),
        (["check", "--stock-deadline", "0.5"], "argument --deadline/--stock-deadline: '0.5'"),
        (["calibrate", "--headroom", "0"], "argument --headroom: '0' must be above 0"),
        (["calibrate", "--headroom", "-1"], "argument --headroom: '-1' must be above 0"),
        (["calibrate", "--headroom", "x"], "argument --headroom: 'x' is not a number"),
        (["calibrate", "--steps", "0"], "argument --steps: '0' must be at least 1"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], needle: str) -> None:
    """argparse convention: exit 2, one line naming the value, no traceback."""
    done = enginedead(*args)
    assert done.returncode == 2, done
    assert needle in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
