"""Every marker of the plugin on one test (no engine is asked for)."""

import pytest


@pytest.mark.enginedead_batch_sizes(2, 4)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(slow_s_per_seq=0.05, hang_at_step=3)
@pytest.mark.enginedead_invariants("cpu_gt_gpu", "capped", cap_s=7200)
def test_all_four():
    pass
