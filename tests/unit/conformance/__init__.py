"""The conformance suite (``pytest_enginedead/conformance/``), without servers."""
