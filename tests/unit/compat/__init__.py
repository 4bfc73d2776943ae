"""vLLM's version differences (``pytest_enginedead/compat/``), including releases not installed here."""
