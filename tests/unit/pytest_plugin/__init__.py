"""The pytest plugin (``pytest_enginedead/pytest_plugin/``), mostly as a downstream repo meets it."""
