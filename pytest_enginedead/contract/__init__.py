"""What vLLM's processes and the harness exchange: variable names, file formats, records.

Runs in every process (the harness, ``VLLM::EngineCore``, ``VLLM::Worker``, the API
server, the commands): standard library only, nothing else of ours.
"""
