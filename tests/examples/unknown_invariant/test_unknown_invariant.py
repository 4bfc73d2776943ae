"""An invariant name that does not exist, beside one that does."""

import pytest


@pytest.mark.enginedead_invariants("cpu_gt_gpu", "fast_enough")
def test_unknown():
    pass


@pytest.mark.enginedead_invariants("capped")
def test_known():
    pass
