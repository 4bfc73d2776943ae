"""The contract between vLLM's processes and the harness (``pytest_enginedead/contract/``)."""
