"""The pytest side (``pytest_enginedead/face/``), mostly as a downstream repo meets it."""
