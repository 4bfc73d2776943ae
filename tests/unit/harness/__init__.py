"""The harness (``pytest_enginedead/harness/``), on real processes without vLLM."""
