"""Reading a process with psutil: is it there, what CPU has it used (its children's too), is it busy.

Used by the harness, the exec probe and the guard inside ``VLLM::EngineCore``: no pytest,
no vLLM, one definition of each question.
"""
