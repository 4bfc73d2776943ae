"""The tests' own support (``tests/support/``)."""
