"""The vLLM plugin: code that runs inside vLLM's own processes, loaded by the ``vllm.general_plugins``
entry (``inside.py``).

``worker`` in ``VLLM::Worker``, ``guard`` in ``VLLM::EngineCore``, ``exiting`` in the API
server.  Imports the contract, pure logic and vLLM's compatibility layer; never pytest.
"""
