"""What each term multiplies, and the experts a mixture of experts' tokens reach."""

from __future__ import annotations

import itertools
import random

import pytest

from pytest_enginedead.logic.sizing import advice
from pytest_enginedead.logic.sizing.fit import Fit
from pytest_enginedead.logic.sizing.shapes import Chunk, Limits, StepPlan
from pytest_enginedead.logic.sizing.terms import Routing, Step, feature, routing_of
from pytest_enginedead.logic.timeouts.policies import Backend
from tests.support.sizing import TRUE, config_26b


def test_the_experts_reached_bend_from_k_to_every_expert() -> None:
    """One token reaches its k experts; more tokens reach more, each fewer new ones than the last (the
    bend a line through tokens cannot follow), and never more than there are: 8 of 32 for one token,
    ~29 for 8 (27-31 measured per layer on the fixture), all 32 from ~32 on."""
    r = Routing(32, 8)
    reached = [r.touched(t) for t in range(0, 65)]
    assert reached[0] == 0 and reached[1] == pytest.approx(8)
    assert reached[8] == pytest.approx(32 * (1 - 0.75**8)) and 27 < reached[8] < 31
    assert reached[32] > 31.99 and reached[64] <= 32
    gains = [b - a for a, b in itertools.pairwise(reached)]
    assert all(g > 0 for g in gains) and all(b < a for a, b in itertools.pairwise(gains))
    assert Routing(4, 8).touched(1) == pytest.approx(4)  # k past E: every expert


def test_the_routing_is_read_from_the_config() -> None:
    cfg = config_26b()
    assert routing_of(cfg, 30) == Routing(128, 8, 30)
    assert routing_of({**cfg, "enable_moe_block": False}, 30) is None
    assert routing_of({"num_local_experts": 8, "num_experts_per_tok": 2}, 32) == Routing(8, 2, 32)  # Mixtral
    deepseek = {"n_routed_experts": 64, "num_experts_per_tok": 6, "first_k_dense_replace": 1}
    assert routing_of(deepseek, 27) == Routing(64, 6, 26)  # its first layer dense
    assert routing_of({"hidden_size": 64}, 4) is None


def test_the_expert_feature_counts_every_moe_layer() -> None:
    step = Step(8, 8, 24)
    assert feature(step, "per_expert", Routing(32, 8, 16)) == pytest.approx(16 * Routing(32, 8).touched(8))
    assert feature(step, "per_expert", None) == 0.0
    assert Fit({"per_expert": 1e-3}, Routing(32, 8, 16)).predict(step) == pytest.approx(
        1e-3 * 16 * Routing(32, 8).touched(8))


def test_the_guard_policy_covers_every_step_of_a_mixture_of_experts() -> None:
    """The policy is linear in sequences and tokens; the experts a step reaches are not: folded into its
    base at every expert of every MoE layer, it still covers any step of each size x the headroom (steps
    of minutes, so that the 300 s floor covers none of them: a decode of one reaches 8 experts in each of
    16 layers, 128 s, which a policy without the fold prices at ~70 s)."""
    f = Fit({**{t: 100 * v for t, v in TRUE.items()}, "per_expert": 1.0}, Routing(32, 8, 16))
    policy = advice.advise(f, Limits(64, 1024, 2048), 512, 3.0, 300.0).policy
    rng = random.Random(5)
    for _ in range(300):
        d = rng.randrange(0, 64)
        chunk = rng.randrange(0, 1024 - d)
        if d == 0 and chunk == 0:
            continue
        chunks = (Chunk(chunk, rng.randrange(0, 2047 - chunk)),) if chunk else ()
        plan = StepPlan(d, rng.randrange(1, 2048), chunks)
        step = plan.step(512)
        assert policy.timeout_s(Backend.CPU, step.seqs, step.tokens) >= 3.0 * f.predict(step) - 1e-9
