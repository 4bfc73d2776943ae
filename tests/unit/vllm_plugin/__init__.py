"""The code that runs inside vLLM's processes (``pytest_enginedead/vllm_plugin/``), without vLLM."""
