"""The guard as the environment asks for it, without vLLM: what the engine core makes of
``ENGINEDEAD_GUARD*`` (on, off, or off with one line naming the variable, its value and why).

(On real engines, in ``tests/engine/test_guard.py``: a policy the engine core cannot
import fails the test; ``tests/engine/test_commands.py``: an exported ``ENGINEDEAD_GUARD=1``
does not guard ``enginedead check``'s stock runs.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_enginedead.logic.inputs.guardconfig import (
    HANG_FLOOR_S,
    PROBED_BATCHES,
    config_from_env,
    misplaced_policy,
)
from tests.support.doors import returning
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
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "1e-9"}, False,
         "ENGINEDEAD_GUARD_HANG_S='1e-9' is below 0.25 s, how often the guard looks at the worker: a wait "
         "would end at its first idle sample"),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "0.25"}, True, None),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "ednowhere_i23:cap"}, False, NOT_IMPORTABLE),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "nonsense"}, False,
         "ENGINEDEAD_GUARD_POLICY='nonsense': use reference, vllm-stock or module:attr, not 'nonsense'"),
    ],
    ids=["unset", "off", "on", "not-a-switch", "hang-not-a-number", "hang-negative", "hang-below-sampling",
         "hang-at-sampling", "policy-not-importable",
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


def test_the_hang_floor_is_how_often_the_guard_samples() -> None:
    """The floor the input checks refuse below is the guard's own sampling interval (``invllm`` may not be
    imported by ``logic``: the two numbers are kept equal here)."""
    from pytest_enginedead.invllm.watch import PROBE_EVERY_S

    assert HANG_FLOOR_S == PROBE_EVERY_S


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


#: policies a production guard must refuse: what each returns, and what the line says of it
CAPS = [
    ("float('nan')", "returned nan; a deadline must be a finite number of seconds >= 1 (vLLM's smallest)"),
    ("float('inf')", "returned inf; a deadline must be a finite number of seconds >= 1"),
    ("0", "returned 0; a deadline must be a finite number of seconds >= 1"),
    ("-5", "returned -5; a deadline must be a finite number of seconds >= 1"),
    ("'600'", "returned '600', not a number of seconds (str; give an int or a float)"),
    ("None", "returned None, not a number of seconds (NoneType; give an int or a float)"),
    ("True", "returned True, not a number of seconds (bool; give an int or a float)"),
    ("1 / 0", "raised ZeroDivisionError: division by zero"),
    ("1e12", "returned 1000000000000.0; a deadline must be at most"),
    ("1 if max_num_seqs < 64 else float('nan')", "timeout_s(CPU, 64) returned nan"),
]


@pytest.mark.parametrize(("returns", "said"), CAPS, ids=["nan", "inf", "zero", "negative", "text", "none",
                                                         "bool", "raises", "beyond-the-bound", "nan-at-64"])
def test_a_guard_policy_that_gives_no_cap_keeps_the_guard_off(
    tmp_path: Path, returns: str, said: str
) -> None:
    """In production (``ENGINEDEAD_GUARD=1`` in a plain vLLM), ``ENGINEDEAD_GUARD_POLICY`` is asked for
    its cap at each of ``PROBED_BATCHES`` before the guard turns on: a cap that is no number vLLM can
    wait (NaN never caps; 0 or less, infinity, text, an exception) keeps the guard off, with one line
    naming the variable, its value, the policy and what it returned."""
    name = f"gpcap_{abs(hash(returns)) % 10**8}_i37"
    [(file, source)] = returning(name, returns).items()
    (tmp_path / file).write_text(source)
    config, problem = config_from_env({
        "ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": f"{name}:p",
        "ENGINEDEAD_GUARD_PATH": str(tmp_path),
    })
    assert config is None
    assert problem is not None and problem.startswith(f"ENGINEDEAD_GUARD_POLICY='{name}:p': policy {name}: "
                                                      "timeout_s(CPU, "), problem
    assert said in problem and "\n" not in problem, problem
    assert PROBED_BATCHES == (1, 8, 64, 256)


def test_the_pytest_options_policy_variable_set_for_the_guard_is_named() -> None:
    """``ENGINEDEAD_POLICY`` is the pytest option's; the guard reads ``ENGINEDEAD_GUARD_POLICY``: set
    alone beside an asked-for guard, the guard says so (and caps with the reference policy)."""
    said = misplaced_policy({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_POLICY": "mod:p"})
    assert said == ("ENGINEDEAD_POLICY='mod:p' is the pytest option's variable; the guard reads "
                    "ENGINEDEAD_GUARD_POLICY (unset: the reference policy caps each step)")
    assert misplaced_policy({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_POLICY": "mod:p",
                             "ENGINEDEAD_GUARD_POLICY": "reference"}) is None
    assert misplaced_policy({"ENGINEDEAD_POLICY": "mod:p"}) is None  # no guard asked: nothing to say
    assert misplaced_policy({"ENGINEDEAD_GUARD": "1"}) is None
