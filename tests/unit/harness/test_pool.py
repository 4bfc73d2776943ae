"""The engine pool's bookkeeping, with engines that start no vLLM.

``FakeEngine`` is the real ``EngineBase`` (run directory, control file, stop by pid)
whose ``start`` only takes its first instructions, as ``Engine.start`` does first.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_enginedead.harness import pool as pool_module
from pytest_enginedead.harness.base import EngineBase, EngineStartError, GuardRefused
from pytest_enginedead.harness.cleanup import ProcessesSurvived, Survivor
from pytest_enginedead.harness.pool import EnginePool
from pytest_enginedead.harness.threads import Progress
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.planning.engines import EngineSpec, Instructions
from tests.support.guards import GUARD_MARKER

A, B = EngineSpec("/m/a", 8), EngineSpec("/m/b", 8)
POLICY, MARKER = Instructions(680.0, "policy reference"), Instructions(2.0, "the enginedead_timeout marker")


class FakeEngine(EngineBase):
    started: list[FakeEngine] = []  # noqa: RUF012 - every engine started in this test, in order

    def start(self, first: Instructions, progress: Progress | None = None) -> FakeEngine:
        self.instruct(first)
        self.start_s = 0.5
        FakeEngine.started.append(self)
        return self


#: a worker the kernel holds in uninterruptible sleep: SIGKILL waits until it lets go
HELD = Survivor(4242, "VLLM::Worker_TP1", "disk-sleep")


class StubbornEngine(FakeEngine):
    def stop(self) -> None:
        super().stop()
        raise ProcessesSurvived([HELD])


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[EnginePool]:
    FakeEngine.started = []
    monkeypatch.setattr(pool_module, "Engine", FakeEngine)
    made = EnginePool(max_alive=1)
    yield made
    made.close()


def test_one_engine_per_spec_told_each_tests_instructions(pool: EnginePool) -> None:
    first = pool.acquire(A, POLICY, "t.py::a")
    again = pool.acquire(A, MARKER, "t.py::b")
    assert again is first and FakeEngine.started == [first]
    assert first.instructions == [POLICY, MARKER]  # the second test's deadline reached it
    [record] = pool.close()
    assert record.engine is first and record.tests == ["t.py::a", "t.py::b"] and not record.restart
    assert first.stopped


def test_at_most_max_alive_engines(pool: EnginePool) -> None:
    a = pool.acquire(A, POLICY)
    b = pool.acquire(B, POLICY)
    assert a.stopped and not b.stopped  # a made room for b
    a2 = pool.acquire(A, POLICY)
    assert a2 is not a and b.stopped
    assert [r.engine for r in pool.close()] == [a, b, a2]


def test_a_broken_engine_found_at_acquire_is_replaced_as_a_restart(pool: EnginePool) -> None:
    engine = pool.acquire(A, POLICY, "t.py::a")
    engine.broken = True  # a call on it failed
    replacement = pool.acquire(A, POLICY, "t.py::b")
    assert replacement is not engine and engine.stopped
    records = pool.close()
    assert [(r.tests, r.restart) for r in records] == [(["t.py::a"], False), (["t.py::b"], True)]


def test_a_broken_engine_released_after_its_test_is_replaced_as_a_restart(pool: EnginePool) -> None:
    """The plugin's flow: the test's call failed, release() after it, the next test acquires."""
    engine = pool.acquire(A, POLICY, "t.py::a")
    engine.broken = True
    pool.release(engine)
    assert engine.stopped
    replacement = pool.acquire(A, POLICY, "t.py::b")
    assert replacement is not engine
    records = pool.close()
    assert [(r.tests, r.restart) for r in records] == [(["t.py::a"], False), (["t.py::b"], True)]


def test_release_keeps_a_healthy_engine(pool: EnginePool) -> None:
    engine = pool.acquire(A, POLICY)
    pool.release(engine)
    assert not engine.stopped and pool.acquire(A, MARKER) is engine


def test_dedicated_engines_are_not_shared_but_stopped_at_close(pool: EnginePool) -> None:
    pool.max_alive = 2
    own = pool.start_dedicated(A, MARKER)
    shared = pool.acquire(A, POLICY)
    assert own is not shared
    records = pool.close()
    assert [r.engine for r in records] == [own, shared] and own.stopped and shared.stopped
    assert pool.close() == []  # each close returns what was started since the last one


def test_a_failed_stop_is_recorded_and_the_rest_still_stop(
    pool: EnginePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool.max_alive = 2
    monkeypatch.setattr(pool_module, "Engine", StubbornEngine)
    stubborn = pool.acquire(A, POLICY)
    monkeypatch.setattr(pool_module, "Engine", FakeEngine)
    fine = pool.acquire(B, POLICY)
    records = pool.close()
    assert records[0].survivors == [HELD]
    assert records[1].survivors == [] and fine.stopped and stubborn.stopped
    assert HELD.describe() == ("pid 4242 (VLLM::Worker_TP1: in uninterruptible sleep (D state): the kernel "
                               "holds it and no signal ends it)")


def test_the_reaper_lives_while_engines_may(pool: EnginePool) -> None:
    pool.acquire(A, POLICY)
    reaper = pool._reaper
    assert reaper is not None and reaper.proc.poll() is None
    pool.close()
    assert reaper.proc.poll() is not None and pool._reaper is None


# --- a configuration whose guard was refused -------------------------------------------------


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
    guarded, plain = EngineSpec(BUNDLED_MODEL, 8, guard=GUARD_MARKER), EngineSpec(BUNDLED_MODEL, 8)
    for _ in range(2):
        with pytest.raises(GuardRefused, match="the guard is off: refused"):
            pool.acquire(guarded, Instructions(2.0))
        with pytest.raises(EngineStartError, match="other"):
            pool.acquire(plain, Instructions(2.0))
    assert starts == [guarded, plain, plain]
