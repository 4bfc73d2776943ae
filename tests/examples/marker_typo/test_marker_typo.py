"""A typo of a marker name: --strict-markers must catch it."""

import pytest


@pytest.mark.enginedead_invariant("capped")
def test_typo():
    pass
