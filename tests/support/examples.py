"""The downstream suites under ``tests/examples/``, one constant per directory.

``downstream.copy(examples.PLAIN)`` copies one into a ``pytester`` directory (it is
``pytester_example_dir``); ``tests/unit/test_examples.py`` holds every constant to a directory
and every directory to a constant.
"""

from __future__ import annotations

#: every marker of the plugin on one test (no engine is asked for)
ALL_MARKERS = "all_markers"
#: a cap of 1000 s: the reference policy (600 s + 10 s/seq) goes above it from batch 41
CAPPED_AT_1000 = "capped_at_1000"
#: an offline engine and an API server, each in a long step, in a false death, or idle
CTRL_C = "ctrl_c"
#: an engine test beside a plain one (without vLLM the first skips)
ENGINE_AND_PLAIN = "engine_and_plain"
#: vllm_engine_factory: an engine with an explicit deadline, faults and engine args; a crash ends it
FACTORY = "factory"
#: two tensor-parallel ranks: warm-up, a stock false death on one rank, the guard with a slow
#: rank and a hung one, and a server with two ranks and a killed rank behind it
TENSOR_PARALLEL = "tensor_parallel"
#: two nodes of one rank (vLLM's multi-node executor, node 1 in a PID namespace of its own):
#: warm-up, a stock false death on node 1, a killed node, the guard with node 1 slow and hung, a server
NODES = "nodes"
#: the false death, cold: batch 64 outlives a 2 s deadline while its worker computes
FALSE_DEATH = "false_death"
#: the original report's model family, shrunk: a Gemma-4 mixture-of-experts with dummy weights
GEMMA = "gemma"
#: a genuine death: a worker that blocks idle (HUNG) (one that exits, DEAD: ``FACTORY``)
GENUINE_DEATHS = "genuine_deaths"
#: the guard: a suite's engine asked wrongly, and a guard the engine core cannot run
GUARD = "guard"
#: a worker that hangs at step 2, cut by pytest-timeout after 6 s
HANG = "hang"
#: headroom over given step times: 3 x (the default) and 5 x
HEADROOM = "headroom"
#: three invariants of the active policy, one per test
INVARIANTS = "invariants"
#: a 16 s step for an xdist worker to be killed in, beside a plain test for the other
LONG_STEP_UNDER_XDIST = "long_step_under_xdist"
#: a typo of a marker name: --strict-markers must catch it
MARKER_TYPO = "marker_typo"
#: one test that asks for an engine (and never gets past its setup when the model is bad)
NEEDS_ENGINE = "needs_engine"
#: what an operator's supervisor sees: the enginedead probe on two servers, and exit statuses
OPERATORS = "operators"
#: a downstream suite without engines (and nothing of the plugin's: it hears nothing of it)
PLAIN = "plain"
#: a real Prometheus scraping a guarded server through a slow window (``harness.probing.promserver``)
PROMETHEUS = "prometheus"
#: a downstream suite that uses the plugin (its policy fixture) and starts no engine
USES_PLUGIN = "uses_plugin"
#: two policies a downstream repo might write (``mypolicies``): one that holds, one flat across backends
POLICIES = "policies"
#: a conftest.py whose ``pytest_enginedead_policy`` hook gives the policy (``mypolicies`` beside it)
POLICY_HOOK = "policy_hook"
#: policy modules for ``--enginedead-policy=module:attr``: policies, non-policies, broken imports
POLICY_MODULES = "policy_modules"
#: no injection: the model's own compute outlives a short deadline
REAL_COMPUTE = "real_compute"
#: the bug's control flow on a real worker process, no vLLM (``procs.py`` copied beside it)
REPRO = "repro"
#: vLLM's OpenAI API server under concurrent clients, stock deadline shortened to 2 s
SERVER = "server"
#: a server whose worker is in a 16 s step (Ctrl-C target) or hangs (pytest-timeout target)
SERVER_CUT = "server_cut"
#: the false death through vLLM's API server, cold: 64 concurrent requests outlive a 2 s deadline
SERVER_FALSE_DEATH = "server_false_death"
#: two tests under their own deadlines and faults, run beside ``STOCK_VS_POLICY`` on its engine
SHARED_ENGINE = "shared_engine"
#: a conftest whose atexit handler prints to stdout and stderr after pytest's last line
PRINTS_AT_EXIT = "prints_at_exit"
#: engine_batch_size without and with the enginedead_batch_sizes marker
SIZED = "sized"
#: vLLM's stock deadline (2 s) against the reference policy, with a busy 0.05 s/seq step
STOCK_VS_POLICY = "stock_vs_policy"
#: an invariant name that does not exist, beside one that does
UNKNOWN_INVARIANT = "unknown_invariant"
#: two engine configurations for two xdist workers: a false death and a pass on one, a guarded crash
XDIST_SUITE = "xdist_suite"
