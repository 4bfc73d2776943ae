"""Headroom over given step times: 3 x (the default) and 5 x."""

import pytest


@pytest.mark.enginedead_invariants("headroom", step_times={8: 0.5, 64: 300.0})
def test_default_headroom():
    pass


@pytest.mark.enginedead_invariants("headroom", headroom=5, step_times={8: 0.5, 64: 300.0})
def test_five_x():
    pass
