"""Every difference between vLLM releases, split by the process it serves.

``versions`` (any process), ``in_worker`` (``VLLM::Worker``), ``in_core``
(``VLLM::EngineCore``), ``in_server`` (the API server and its clients), ``llm_api``
(the harness's ``vllm.LLM``), ``registry`` (which architectures vLLM builds).  None of
them imports vLLM at module import time.
"""
