"""The guard as the environment asks for it, without vLLM: what the engine core makes of
``ENGINEDEAD_GUARD*`` (on, off, or off with one line naming the variable, its value and why).

(On real engines, in ``tests/engine/test_guard.py``: a policy the engine core cannot
import fails the test; ``tests/engine/test_commands.py``: an exported ``ENGINEDEAD_GUARD=1``
does not guard ``enginedead check``'s stock runs.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_enginedead.logic.guardconfig import config_from_env
from tests.support.guards import NOT_IMPORTABLE


@pytest.mark.parametrize(
    ("environ", "on", "problem"),
    [
        ({}, False, None),
        ({"ENGINEDEAD_GUARD": "0", "ENGINEDEAD_GUARD_POLICY": "ednowhere_i23:cap"}, False, None),
        ({"ENGINEDEAD_GUARD": "1"}, True, None),
        ({"ENGINEDEAD_GUARD": "maybe"}, False, "ENGINEDEAD_GUARD='maybe' is not 1 or 0"),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "soon"}, False,
         "ENGINEDEAD_GUARD_HANG_S='soon' is not a number of seconds above 0"),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "-1"}, False,
         "ENGINEDEAD_GUARD_HANG_S='-1' is not a number of seconds above 0"),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "ednowhere_i23:cap"}, False, NOT_IMPORTABLE),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "nonsense"}, False,
         "ENGINEDEAD_GUARD_POLICY='nonsense': use reference, vllm-stock or module:attr, not 'nonsense'"),
    ],
    ids=["unset", "off", "on", "not-a-switch", "hang-not-a-number", "hang-negative", "policy-not-importable",
         "policy-not-a-spec"],
)
def test_what_the_engine_core_makes_of_its_environment(
    environ: dict[str, str], on: bool, problem: str | None
) -> None:
    """On, off, or off with one line naming the variable, its value and why (production: that
    line is logged and vLLM runs as stock; under the harness it fails the test)."""
    config, said = config_from_env(environ)
    assert (config is not None) == on
    assert said == problem


def test_a_policy_module_on_the_guard_path_is_found(tmp_path: Path) -> None:
    (tmp_path / "edguardpath_i23.py").write_text(
        "class P:\n    name = 'p'\n    def timeout_s(self, backend, n, tokens=None):\n        return 900.0\n"
        "p = P()\n"
    )
    config, problem = config_from_env({
        "ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "edguardpath_i23:p",
        "ENGINEDEAD_GUARD_PATH": str(tmp_path), "ENGINEDEAD_GUARD_HANG_S": "3",
    })
    assert problem is None and config is not None
    assert (config.spec, config.policy_name, config.hang_s) == ("edguardpath_i23:p", "p", 3.0)
