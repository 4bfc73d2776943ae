"""A death's verdict: what the code inside vLLM left (``evidence``, ``stacks``), how the
processes behaved (``liveness``), the other nodes' ranks (``remote``), and the verdict itself
(``verdict``: SLOW, HUNG or DEAD, with the evidence).
"""
