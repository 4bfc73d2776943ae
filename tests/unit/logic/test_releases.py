"""What each vLLM release does, read from its source: pure facts by version.

The facts come from each release's source (the deadline's history, the V0 death
classes); these tests pin them.
"""

from __future__ import annotations

import pytest

from pytest_enginedead.logic import releases
from tests.support.standins import fake_class


@pytest.mark.parametrize(
    ("version", "stock", "env", "multiprocess"),
    [
        ("0.8.5", 40.0, None, False),  # hard-coded 40 s
        ("0.9.0", 300.0, None, False),  # hard-coded 300 s
        ("0.9.1", 300.0, None, False),
        ("0.9.2", 300.0, releases.DEADLINE_ENV, False),  # the variable appears
        ("0.10.2", 300.0, releases.DEADLINE_ENV, False),
        ("0.19.9", 300.0, releases.DEADLINE_ENV, False),  # CPU: uniprocess, no deadline applies
        ("0.20.0", 300.0, releases.DEADLINE_ENV, True),  # CPU: multiprocess by default
        ("0.27.1", 300.0, releases.DEADLINE_ENV, True),
        ("0.32.0+cpu", 300.0, releases.DEADLINE_ENV, True),
    ],
)
def test_deadline_history(version: str, stock: float, env: str | None, multiprocess: bool) -> None:
    facts = releases.deadline_facts(version)
    assert (facts.stock_s, facts.env_var, facts.multiprocess_on_cpu) == (stock, env, multiprocess)


def test_stock_deadline_reads_the_variable_only_where_it_exists() -> None:
    environ = {releases.DEADLINE_ENV: "45"}
    assert releases.stock_deadline_s(environ, "0.32.0") == 45.0
    assert releases.stock_deadline_s(environ, "0.9.1") == 300.0  # hard-coded there
    assert releases.stock_deadline_s(environ, "0.8.5") == 40.0
    assert releases.stock_deadline_s({}, "0.32.0") == 300.0
    with pytest.raises(ValueError, match="not an integer"):
        releases.stock_deadline_s({releases.DEADLINE_ENV: "2.5"}, "0.32.0")


@pytest.mark.parametrize(("seconds", "env"), [(0.2, "1"), (1.0, "1"), (1.01, "2"), (1240.0, "1240")])
def test_deadline_rounds_up_to_whole_seconds(seconds: float, env: str) -> None:
    """vLLM parses the variable with int(): never shorter than asked, never 0."""
    assert releases.deadline_env_value(seconds) == env


def test_death_classes_per_release() -> None:
    v1 = "vllm.v1.engine.exceptions.EngineDeadError"
    v0 = {
        "vllm.engine.async_llm_engine.AsyncEngineDeadError",
        "vllm.engine.multiprocessing.MQEngineDeadError",
    }
    assert set(releases.death_classes_for("0.10.2")) == {v1, *v0}
    assert releases.death_classes_for("0.11.0") == [v1]
    assert releases.death_classes_for("0.32.0") == [v1]
    assert set(releases.death_classes_for("0.8.0")) == v0  # before V1's class existed


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("vllm.v1.engine.exceptions", "EngineDeadError"),
        ("vllm.engine.async_llm_engine", "AsyncEngineDeadError"),
        ("vllm.engine.multiprocessing", "MQEngineDeadError"),
    ],
)
def test_every_death_class_is_recognised_without_vllm(module: str, name: str) -> None:
    cls = type(name, (RuntimeError,), {"__module__": module})
    sub = type("Sub" + name, (cls,), {"__module__": "elsewhere"})
    assert releases.is_engine_death(cls())
    assert releases.is_engine_death(sub())  # subclasses too, along the MRO
    assert not releases.is_engine_death(type(name, (RuntimeError,), {"__module__": "mine"})())


def test_version_parsing() -> None:
    assert releases.parse_version("0.32.0+cpu") == (0, 32, 0)
    assert releases.as_version("not a version") == releases.NEWEST
    assert releases.as_version(None) == releases.NEWEST
    with pytest.raises(ValueError):
        releases.parse_version("cpu")


# --- which exceptions count as an engine death -----------------------------------------------


@pytest.mark.parametrize(
    ("module", "name", "expected"),
    [
        ("vllm.v1.engine.exceptions", "EngineDeadError", True),
        ("vllm.engine.async_llm_engine", "AsyncEngineDeadError", True),
        ("vllm.engine.multiprocessing", "MQEngineDeadError", True),
        ("vllm.v1.engine.exceptions", "EngineGenerateError", False),
        ("vllm.engine.exceptions", "EngineDeadError", False),
        ("builtins", "TimeoutError", False),
    ],
)
def test_is_engine_death_by_module_and_name(module: str, name: str, expected: bool) -> None:
    """Every release's death classes, by module and name; nothing else."""
    assert releases.is_engine_death(fake_class(module, name)()) is expected


def test_subclass_of_engine_death_is_recognised() -> None:
    """Matching walks the MRO, so a subclass of EngineDeadError is a death too."""
    base = fake_class("vllm.v1.engine.exceptions", "EngineDeadError")
    sub = type("MyDeadError", (base,), {"__module__": "myapp"})
    assert releases.is_engine_death(sub())
    assert not releases.is_engine_death(RuntimeError("EngineDeadError"))
