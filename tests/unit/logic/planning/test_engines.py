"""Planning, pure: which engine each test needs, which share one, order, budget, deadline.

Kept to the contract (what shares, what runs first, what a budget covers) so that
planning's internals can change (engine reuse) without rewriting these.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pytest_enginedead.contract.control import Injection
from pytest_enginedead.logic import releases
from pytest_enginedead.logic.planning.engines import (
    DeadlineAndFaults,
    EngineRequest,
    EngineSpec,
    GuardSpec,
    TestPlan,
    budget_s,
    order,
    plan,
    share,
    spec_for,
)

MODEL = "/models/tiny-llama"


def need(
    batch: int, deadline: float = 680.0, injection: Injection | None = None, **kwargs: object
) -> EngineRequest:
    orders = DeadlineAndFaults(deadline, "policy reference", injection or Injection())
    return EngineRequest(batch, orders, **kwargs)  # type: ignore[arg-type]


# --- specs and sharing ---------------------------------------------------------------------


def test_spec_for_keeps_what_vllm_fixes_at_start() -> None:
    guard = GuardSpec(hang_s=30.0)
    spec = spec_for(need(8, guard=guard, server=True), MODEL, cpu_bind="0,1")
    assert spec == EngineSpec(MODEL, 8, (), "0,1", guard, True)


def test_share_sizes_one_engine_for_the_largest_batch() -> None:
    specs = [spec_for(need(n), MODEL) for n in (8, 64, 2)]
    assert [s.max_num_seqs for s in share(specs)] == [64, 64, 64]
    assert len(set(share(specs))) == 1


def test_share_keeps_distinct_configurations_apart() -> None:
    """A different model, guard, server or engine argument is another engine."""
    base = EngineSpec(MODEL, 8)
    others = [
        EngineSpec("/models/other", 4),
        EngineSpec(MODEL, 4, guard=GuardSpec(60.0)),
        EngineSpec(MODEL, 4, server=True),
        EngineSpec(MODEL, 4, extra_args=(("max_model_len", 256),)),
        EngineSpec(MODEL, 4, cpu_bind="1"),
    ]
    shared = share([base, *others, EngineSpec(MODEL, 16)])
    assert shared[0] == shared[-1] == EngineSpec(MODEL, 16)
    assert [s.max_num_seqs for s in shared[1:-1]] == [4, 4, 4, 4, 4]  # nobody grew them
    assert len(set(shared)) == 1 + len(others)


def test_share_returns_one_spec_per_input_in_order() -> None:
    assert share([]) == []
    a, b = EngineSpec(MODEL, 2), EngineSpec("/m/b", 3)
    assert share([a, b, a]) == [a, b, a]


# --- order --------------------------------------------------------------------------------


def planned(spec: EngineSpec, batch: int, deadline: float = 680.0, **faults: object) -> TestPlan:
    return TestPlan(batch, spec, DeadlineAndFaults(deadline, "policy", Injection(**faults)))  # type: ignore[arg-type]


def test_order_runs_plain_tests_first_then_each_engine_together() -> None:
    a, b = EngineSpec(MODEL, 8), EngineSpec("/m/b", 8)
    tests = [planned(a, 8), None, planned(b, 8), planned(a, 8), None, TestPlan(0, None, None, "bad marker")]
    # plain and unplannable tests keep their order; then engine a's tests, then b's
    assert order(tests) == [1, 4, 5, 0, 3, 2]


def test_order_within_an_engine_puts_tests_that_may_end_it_last() -> None:
    """Faults that end the engine last; then smaller batches first; then longer deadlines first."""
    e = EngineSpec(MODEL, 64)
    tests = [
        planned(e, 4, crash_at_step=2),  # 0: ends the engine
        planned(e, 64, 2.0),  # 1: large batch, short deadline: may die
        planned(e, 2, 2.0),  # 2
        planned(e, 64, 1240.0),  # 3
        planned(e, 4, hang_at_step=2),  # 4: ends the engine
        planned(e, 2, 680.0),  # 5
        planned(e, 4, slow_s_per_seq=0.05),  # 6: slow but not fatal
    ]
    assert order(tests) == [5, 2, 6, 3, 1, 0, 4]


def test_order_is_a_permutation_and_stable() -> None:
    e = EngineSpec(MODEL, 8)
    tests: list[TestPlan | None] = [planned(e, 8) for _ in range(5)]
    assert order(tests) == [0, 1, 2, 3, 4]
    assert order([]) == []


# --- plan -----------------------------------------------------------------------------------


def test_plan_shares_orders_and_counts_configurations() -> None:
    needs: list[EngineRequest | str | None] = [
        need(64, 2.0),  # 0
        None,  # 1: no engine
        need(2, 2.0),  # 2: shares 0's engine (same model and arguments)
        "@pytest.mark.enginedead_timeout: bad",  # 3: cannot be planned
        need(8, guard=GuardSpec(60.0)),  # 4: another engine
    ]
    p = plan(needs, MODEL, cpu_bind="0")
    assert p.tests[1] is None
    bad = p.tests[3]
    assert bad is not None and bad.spec is None and bad.error == "@pytest.mark.enginedead_timeout: bad"
    t0, t2, t4 = p.tests[0], p.tests[2], p.tests[4]
    assert t0 is not None and t2 is not None and t4 is not None
    assert t0.spec == t2.spec == EngineSpec(MODEL, 64, cpu_bind="0")
    assert (t0.batch_size, t2.batch_size) == (64, 2)  # each runs its own batch on it
    assert t2.instructions == DeadlineAndFaults(2.0, "policy reference", Injection())
    assert t4.spec is not None and t4.spec.guard == GuardSpec(60.0) and t4.spec != t0.spec
    assert p.configurations == 2
    assert p.engine_specs == [t0.spec, t2.spec, t4.spec]
    assert p.order == [1, 3, 2, 0, 4]


def test_plan_without_engines() -> None:
    p = plan([None, None], MODEL)
    assert p.configurations == 0 and p.engine_specs == [] and p.order == [0, 1]


# --- instructions and budget -------------------------------------------------------------


@pytest.mark.parametrize(
    ("deadline", "env", "budget"),
    [(2.0, "2", 244), (0.2, "1", 242), (1.01, "2", 244), (1240.0, "1240", 2720)],
)
def test_budget_is_start_plus_two_deadlines_as_vllm_reads_them(
    deadline: float, env: str, budget: int
) -> None:
    """180 s start-up allowance + 2 x the whole-second deadline + 60 s, rounded up."""
    ins = DeadlineAndFaults(deadline)
    assert ins.deadline_env == env and ins.deadline_whole_s == float(env)
    assert budget_s(ins) == budget
    assert budget_s(ins, start_allowance_s=0.5) == math.ceil(0.5 + 2 * float(env) + 60)


def test_instructions_describe_and_fatal() -> None:
    assert DeadlineAndFaults(2.0).describe() == "deadline 2 s"
    slow = DeadlineAndFaults(2.0, injection=Injection(slow_s_per_seq=0.05))
    assert slow.describe() == "deadline 2 s, busy 0.05 s/seq" and not slow.fatal
    assert DeadlineAndFaults(2.0, injection=Injection(hang_at_step=2)).fatal
    assert DeadlineAndFaults(2.0, injection=Injection(crash_at_step=1)).fatal


def test_spec_label_names_what_differs() -> None:
    assert EngineSpec(MODEL + "/", 8).label() == "bs8, model tiny-llama"
    label = EngineSpec(MODEL, 4, (("max_model_len", 256),), guard=GuardSpec(30.0), server=True).label()
    assert label == "server, bs4, model tiny-llama, guard (policy reference, hang_s 30 s), max_model_len=256"


def test_the_budget_holds_the_longest_deadline_vllm_can_make() -> None:
    assert budget_s(DeadlineAndFaults(float(releases.MAX_DEADLINE_S))) == releases.MAX_DEADLINE_S


def test_each_test_keeps_its_deadline_what_the_policy_allows_and_the_guards_cap() -> None:
    """Planned once: the handle, the evidence of a death and the test's budget read the plan."""
    asked = replace(need(64, deadline=2.0, guard=GuardSpec(3.0)), policy_deadline_s=1240.0,
                    guard_cap_s=1240.0)
    [test] = plan([asked], MODEL).tests
    assert test is not None and (test.policy_deadline_s, test.guard_cap_s) == (1240.0, 1240.0)
    assert test.instructions is not None and test.instructions.deadline_whole_s == 2.0
    assert test.budget_s == budget_s(asked.instructions, 1240.0) > budget_s(asked.instructions)


def test_a_shard_keeps_the_plans_of_its_tests() -> None:
    p = plan([need(8), None, need(64, guard=GuardSpec(3.0))], MODEL)
    kept = p.keeping([2, 1])
    assert kept.tests == [p.tests[2], p.tests[1]]
    assert kept.configurations == 1 and kept.order == [1, 0]  # the test without an engine first
