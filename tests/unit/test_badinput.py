"""Every input has its bad values: the tables beside each input's tests, together.

Each input's table lives with that input's tests (the conventions they are held to:
``tests/support/badinput.py``); this counts them as one.
"""

from __future__ import annotations

from tests.unit.commands import test_calibrate, test_check
from tests.unit.pytest_plugin import test_fixtures, test_hooks, test_markers, test_options

#: the pytest inputs' tables: options (flags, ini keys, variables, the policy and model they
#: name), markers, the policy hook, the factories
CASES = [*test_options.CASES, *test_markers.CASES, *test_hooks.CASES, *test_fixtures.CASES]
#: the enginedead command's tables: check, calibrate
COMMAND_CASES = [*test_check.COMMAND_CASES, *test_calibrate.COMMAND_CASES]


def test_the_table_is_large_enough() -> None:
    """At least 60 bad inputs across every kind of input (with the command's, below)."""
    doors = {c.id.split("-")[0] for c in CASES}
    assert {"flag", "env", "vllm", "ini", "toml", "marker", "hook", "policy", "factory", "model"} <= doors
    assert len(CASES) + len(COMMAND_CASES) >= 60
