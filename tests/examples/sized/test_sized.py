"""engine_batch_size without and with the enginedead_batch_sizes marker."""

import pytest


def test_default(engine_batch_size):
    assert engine_batch_size > 0


@pytest.mark.enginedead_batch_sizes(2, 4, 2)
def test_marked(engine_batch_size):
    assert engine_batch_size in (2, 4)
