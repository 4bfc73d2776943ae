"""Three invariants of the active policy, one per test."""

import pytest


@pytest.mark.enginedead_invariants("cpu_gt_gpu")
def test_cpu_gt_gpu():
    pass


@pytest.mark.enginedead_invariants("grows_with_batch")
def test_grows_with_batch():
    pass


@pytest.mark.enginedead_invariants("capped")
def test_capped():
    pass
