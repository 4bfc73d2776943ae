"""The plugin's options, one definition each: name, help, default, parser.

Each is a flag (``--enginedead-x``), an ini key (``enginedead_x``) and a variable
(``ENGINEDEAD_X``) with one help text; ``pytest_plugin.options`` gives them to pytest and resolves
them, the commands and the documentation read them from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...contract.decisions import BUSY_CORES, DEFAULT_INTERVAL_S
from .modelconfig import validate_model
from .values import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    parse_batch_sizes,
    parse_fraction,
    parse_nodes,
    parse_policy,
    parse_ranks,
    parse_seconds,
    parse_shard,
    parse_switch,
    validate_input_path,
    validate_output_path,
)


@dataclass(frozen=True)
class Option:
    name: str  # ini key; the flag is --name with - for _
    help: str
    default: str | None
    parse: Callable[[str], Any]
    metavar: str
    #: a switch: ``--flag`` alone turns it on (ini / env take 1 or 0)
    switch: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return self.name.upper()


OPTIONS = (
    Option(
        "enginedead_batch_sizes",
        "Comma list of batch sizes the engine fixtures run at (default 8,64).",
        "8,64", parse_batch_sizes, "N,N",
    ),
    Option(
        "enginedead_model",
        "Model directory for engine fixtures: a HF-style dir, config.json is enough "
        "(dummy weights). Default: the bundled tiny Llama.",
        None, validate_model, "DIR",
    ),
    Option(
        "enginedead_policy",
        "Timeout policy: reference, vllm-stock (vLLM's fixed deadline, shows the bug) "
        "or module:attr (an object with timeout_s). Default: reference.",
        None, parse_policy, "POLICY",
    ),
    Option(
        "enginedead_report",
        "Write the JSON report of engines, steps and verdicts to this path.",
        None, validate_output_path, "PATH",
    ),
    Option(
        "enginedead_guard",
        "Start every engine with the guard on: vLLM's deadline becomes the point of "
        "suspicion, a busy worker gets up to the policy's cap, a hung one ends after 60 s "
        "(marker enginedead_guard for one test).",
        "0", parse_switch, "", switch=True,
    ),
    Option(
        "enginedead_shard",
        "Run shard K of N (e.g. 1/2) of the collected tests: every test in exactly one shard, "
        "the tests sharing an engine configuration in the same one (one start each), balanced "
        "by --enginedead-durations when given, else by tests and engine starts.",
        None, parse_shard, "K/N",
    ),
    Option(
        "enginedead_durations",
        "Test durations to balance shards by: a file written by --enginedead-store-durations "
        "on the same vLLM release; {vllm} in the path becomes the installed release.",
        None, validate_input_path, "PATH",
    ),
    Option(
        "enginedead_store_durations",
        "Write each test's duration (setup + call + teardown) to this path at the end of the "
        "run, for --enginedead-durations; {vllm} in the path becomes the installed release.",
        None, validate_output_path, "PATH",
    ),
    Option(
        "enginedead_busy_threshold",
        "CPU use, as a share of one core over the sample window, above which a live "
        "engine process counts as computing (default 0.05 = 5%).",
        str(BUSY_CORES), parse_fraction, "SHARE",
    ),
    Option(
        "enginedead_tensor_parallel_size",
        "Tensor-parallel ranks of the engines the vllm_engine and vllm_server fixtures start: one "
        "worker process per rank, each bound to its own cores unless VLLM_CPU_OMP_THREADS_BIND is set "
        "(default 1; the factories take tensor_parallel_size=).",
        "1", parse_ranks, "N",
    ),
    Option(
        "enginedead_nodes",
        "Nodes the ranks of the vllm_engine and vllm_server fixtures' engines spread over (vLLM's "
        "multi-node executor: --nnodes): the head and N-1 headless nodes, on this machine each in a "
        "PID namespace of its own, their ranks judged from the progress they publish; one rank per "
        "node unless --enginedead-tensor-parallel-size gives more (default 1; the factories take nodes=).",
        "1", parse_nodes, "N",
    ),
    Option(
        "enginedead_sample_interval",
        f"Seconds between liveness samples of engine processes (default 0.1; at least "
        f"{MIN_INTERVAL_S:g}, at most {MAX_INTERVAL_S:g}).",
        str(DEFAULT_INTERVAL_S), parse_seconds, "SECONDS",
    ),
)
