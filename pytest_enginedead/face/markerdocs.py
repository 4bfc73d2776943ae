"""The markers' documentation, registered at every run's configure (``--strict-markers``):
apart from their parsing (``face.markers``), so that a run without an engine test imports
nothing else of the plugin's markers.
"""

from __future__ import annotations

DOCS = (
    "enginedead_batch_sizes(*sizes): run this test's engine fixtures at these batch "
    "sizes instead of --enginedead-batch-sizes.",
    "enginedead_invariants(*names, cap_s=None, headroom=None, step_times=None): check "
    "these invariants of the active timeout policy (cpu_gt_gpu, grows_with_batch, "
    "capped, headroom, not_below_stock); a violation fails the test with the numbers. "
    "headroom uses the engine's measured step times, or step_times={batch: seconds}.",
    "enginedead_timeout(seconds): pin this test's engine to a fixed execute-model "
    "deadline instead of the policy (to reproduce vLLM's stock behaviour).",
    "enginedead_guard(hang_s=None, policy=None): run this test's engine with the guard on: "
    "vLLM's deadline becomes the point of suspicion; a busy worker gets up to the policy's "
    "cap, a worker idle for hang_s (default 60, at least 0.25) ends the wait.",
    "enginedead_inject(slow_s_per_seq=0.0, hang_at_step=None, crash_at_step=None, spin_at_step=None, "
    "ranks=None, nodes=None): fault injection inside the engine's worker: each step burns CPU for "
    "slow_s_per_seq x its batch size, spread over its layers (it advances, as real compute does); "
    "at step N (from 1) it blocks idle forever in its middle layer (hang), exits the worker process "
    "(crash), or spins at 100 % CPU in its middle layer without advancing (spin, a livelock); "
    "ranks=[...] applies them to those worker ranks only "
    "(tensor parallel; default every rank), nodes=[...] to the ranks on those nodes "
    "(several nodes; default every node).",
)
