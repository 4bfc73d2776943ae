"""A downstream suite that uses the plugin without an engine: the active policy's deadlines."""

from pytest_enginedead import Backend


def test_the_policy_gives_cpu_more_than_gpu(enginedead_policy):
    assert enginedead_policy.timeout_s(Backend.CPU, 8) >= enginedead_policy.timeout_s(Backend.GPU, 8)
