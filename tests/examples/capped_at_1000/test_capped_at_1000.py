"""A cap of 1000 s: the reference policy (600 s + 10 s/seq) goes above it from batch 41."""

import pytest


@pytest.mark.enginedead_invariants("capped", cap_s=1000.0)
def test_capped():
    pass
