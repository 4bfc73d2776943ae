"""A downstream suite without engines."""


def test_plain():
    pass
