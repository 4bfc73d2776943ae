"""Kept for the documented command line, deprecated, removed in 0.4.0: the code inside vLLM's
processes lives in ``pytest_enginedead.vllm_plugin``."""
