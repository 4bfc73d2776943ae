"""The guard's start-up, without vLLM: what the engine core makes of its environment, the
record it writes, how the harness holds that record against what it asked for, and the
guard variables the harness passes to (or keeps from) every engine it starts.

(On real engines, in ``tests/engine/test_guard.py``: a policy the engine core cannot
import fails the test; ``tests/engine/test_commands.py``: an exported ``ENGINEDEAD_GUARD=1``
does not guard ``enginedead check``'s stock runs.)
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_enginedead.contract.guardfiles import (
    CORE_READY_FILE,
    CoreReady,
    core_ready_path,
    read_core_ready,
    write_core_ready,
)
from pytest_enginedead.contract.names import ENV_DIR
from pytest_enginedead.harness.base import EngineBase, EngineStartError, GuardRefused, guard_problem
from pytest_enginedead.harness.environment import cleared_variables, process_environment
from pytest_enginedead.harness.pool import EnginePool
from pytest_enginedead.invllm import guard
from pytest_enginedead.logic.guardconfig import config_from_env
from pytest_enginedead.logic.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.planning import EngineSpec, GuardSpec, Instructions

NOT_IMPORTABLE = ("ENGINEDEAD_GUARD_POLICY='ednowhere_i23:cap': the policy module is not importable in "
                  "the engine core: add it to PYTHONPATH or ENGINEDEAD_GUARD_PATH "
                  "(no module named 'ednowhere_i23')")


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


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "3.0"},
         CoreReady(0, True, True, "reference", "reference", 3.0, None)),
        ({"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "ednowhere_i23:cap"},
         CoreReady(0, False, True, "ednowhere_i23:cap", None, None, NOT_IMPORTABLE)),
        ({"ENGINEDEAD_GUARD": "0"}, CoreReady(0, False, False, None, None, None, None)),
    ],
    ids=["on", "refused", "off"],
)
def test_the_engine_core_writes_the_guards_start_up_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], expected: CoreReady
) -> None:
    """``guard.register`` in the engine core (vLLM's classes not patched here): its record says
    on with which policy and hang_s, or off and why, in the format record.py gives both sides."""
    monkeypatch.setattr(guard, "in_engine_core", lambda: True)
    monkeypatch.setattr(guard, "_install", lambda core: None)
    guard.register({**environ, ENV_DIR: str(tmp_path)})
    ready = read_core_ready(str(tmp_path))
    assert ready is not None and ready.pid > 0
    assert ready == replace(expected, pid=ready.pid)


MARKER = GuardSpec(3.0, "edcap:cap", "the enginedead_guard marker")


@pytest.mark.parametrize(
    ("asked", "ready", "needles"),
    [
        (MARKER, CoreReady(7, True, True, "edcap:cap", "cap-4s", 3.0), None),
        (None, CoreReady(7, False, False), None),
        (MARKER, CoreReady(7, False, True, "edcap:cap", problem=NOT_IMPORTABLE),
         ("the guard is off: the enginedead_guard marker asked for the guard (policy 'edcap:cap', "
          "hang_s 3 s), and VLLM::EngineCore (pid 7) refused it: " + NOT_IMPORTABLE,)),
        (MARKER, CoreReady(7, False, False), ("VLLM::EngineCore (pid 7) refused it: ENGINEDEAD_GUARD "
                                                     "did not reach it",)),
        (MARKER, CoreReady(7, True, True, "reference", "reference", 3.0),
         ("the guard is not as asked", "runs it with policy 'reference', hang_s 3 s")),
        (MARKER, CoreReady(7, True, True, "edcap:cap", "cap-4s", 60.0), ("hang_s 60 s",)),
        (None, CoreReady(7, True, True, "reference", "reference", 60.0),
         ("the guard was not asked for, but VLLM::EngineCore (pid 7) saw ENGINEDEAD_GUARD set (on)",)),
    ],
    ids=["as-asked", "off-as-asked", "refused", "never-reached", "other-policy", "other-hang", "unasked"],
)
def test_the_harness_holds_the_record_against_what_it_asked(
    asked: GuardSpec | None, ready: CoreReady, needles: tuple[str, ...] | None
) -> None:
    problem = guard_problem(asked, ready)
    if needles is None:
        assert problem is None
        return
    assert problem is not None and "\n" not in problem
    for needle in needles:
        assert needle in problem, (needle, problem)


def test_core_ready_round_trip(tmp_path: Path) -> None:
    assert read_core_ready(str(tmp_path)) is None  # not written yet
    ready = CoreReady(12, False, True, "a:b", None, None, "why")
    write_core_ready(str(tmp_path), ready)
    assert read_core_ready(str(tmp_path)) == ready
    assert [p.name for p in tmp_path.iterdir()] == [CORE_READY_FILE]  # no temp file left
    Path(core_ready_path(str(tmp_path))).write_text('{"pid": 3, "guard": true}')  # 0.2.0's keys
    assert read_core_ready(str(tmp_path)) == CoreReady(3, True)
    Path(core_ready_path(str(tmp_path))).write_text("{not json")
    assert read_core_ready(str(tmp_path)) is None


# --- what reaches an engine --------------------------------------------------------------------

SHELL = {"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "mine:cap", "ENGINEDEAD_GUARD_HANG_S": "soon",
         "ENGINEDEAD_GUARD_PATH": "/opt/policies", "PATH": "/usr/bin"}


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
def test_the_guard_a_shell_exports_never_reaches_an_engine(guarded: bool) -> None:
    """An operator's production ``ENGINEDEAD_GUARD*``: an engine not asked to be guarded gets
    ``ENGINEDEAD_GUARD=0`` and none of the others; a guarded one gets the harness's values."""
    spec = EngineSpec(BUNDLED_MODEL, 8, guard=GuardSpec(3.0, "edcap:cap") if guarded else None)
    engine = EngineBase(spec)
    try:
        env = process_environment(engine.environment(Instructions(2.0)), spec, SHELL)
    finally:
        engine.stop()
    assert env["PATH"] == "/usr/bin"
    guard_env = {k: v for k, v in env.items() if k.startswith("ENGINEDEAD_GUARD")}
    if not guarded:
        assert guard_env == {"ENGINEDEAD_GUARD": "0"}
        assert cleared_variables(spec) == ["ENGINEDEAD_GUARD_POLICY", "ENGINEDEAD_GUARD_HANG_S",
                                              "ENGINEDEAD_GUARD_PATH"]
        return
    assert guard_env["ENGINEDEAD_GUARD"] == "1"
    assert guard_env["ENGINEDEAD_GUARD_POLICY"] == "edcap:cap"
    assert guard_env["ENGINEDEAD_GUARD_HANG_S"] == "3.0"
    assert "/opt/policies" not in guard_env["ENGINEDEAD_GUARD_PATH"]


def test_a_refused_guard_is_not_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool remembers a configuration whose engine core refused its guard: the next test of
    it fails at once with the same line, no second engine (the same environment would be
    refused again); other configurations start as usual."""
    starts: list[EngineSpec] = []

    def start(self: EnginePool, spec: EngineSpec, instructions: Instructions, restart: bool = False) -> None:
        starts.append(spec)
        raise GuardRefused("the guard is off: refused") if spec.guard else EngineStartError("other")

    monkeypatch.setattr(EnginePool, "start_dedicated", start)
    pool = EnginePool()
    guarded, plain = EngineSpec(BUNDLED_MODEL, 8, guard=MARKER), EngineSpec(BUNDLED_MODEL, 8)
    for _ in range(2):
        with pytest.raises(GuardRefused, match="the guard is off: refused"):
            pool.acquire(guarded, Instructions(2.0))
        with pytest.raises(EngineStartError, match="other"):
            pool.acquire(plain, Instructions(2.0))
    assert starts == [guarded, plain, plain]
