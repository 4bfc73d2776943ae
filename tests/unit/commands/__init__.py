"""The ``enginedead`` commands (``pytest_enginedead/commands/``), without engines."""
