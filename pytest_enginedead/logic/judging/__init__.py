"""The one judge of a worker's liveness: from each rank's evidence, its verdict and the reason.

The guard inside ``VLLM::EngineCore`` (live, at every look), the harness's verdict after an engine
death, and ``enginedead probe`` all call ``judge_ranks``: a new kind of evidence is taught here once.
"""
