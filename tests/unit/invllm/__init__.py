"""The code that runs inside vLLM's processes (``pytest_enginedead/invllm/``), without vLLM."""
