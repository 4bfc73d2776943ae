"""The pytest face (``pytest_enginedead/face/``), mostly as a downstream repo meets it."""
