"""A module that cannot be imported: it raises ZeroDivisionError."""

1 / 0  # noqa: B018
