"""Starting and driving a ``vllm.LLM`` (and its processes) the same way in every release.

vLLM is imported inside the functions that need it, never at module import.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
import warnings
from collections.abc import Sequence
from typing import Any


def shutdown_llm(llm: Any) -> None:
    """Ask an ``LLM`` to stop its engine processes (best effort, any release)."""
    engine = getattr(llm, "llm_engine", None)
    client = getattr(engine, "engine_core", None)
    for target in (client, engine, llm):
        stop = getattr(target, "shutdown", None)
        if callable(stop):
            stop()
            return


def expect_exit(llm: Any) -> None:
    """Tell an ``LLM``'s client that its engine core is about to be stopped on purpose.

    The client's monitor thread (``MPClient.start_engine_core_monitor``, 0.27.1-0.32.0)
    logs "[shutdown] MPClient: engine core exited unexpectedly" when the process it
    watches ends, unless ``resources.engine_dead`` is already set; a harness that ends
    the engine by pid would see that warning after its summary.
    """
    resources = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "resources", None)
    if resources is not None and hasattr(resources, "engine_dead"):
        resources.engine_dead = True


def quiet_repr(llm: Any) -> None:
    """Make ``repr(llm)`` local.

    ``LLM.__repr__`` (0.27 on) asks the workers for a model summary over RPC.  When
    pytest formats a traceback that passes through ``LLM.generate`` (Ctrl-C, a
    pytest-timeout cut) it reprs ``self``, and that RPC waits forever on an engine
    whose worker is busy or gone.  vLLM caches the text in ``_cached_repr``.
    """
    if hasattr(llm, "_cached_repr"):
        model = getattr(getattr(llm, "model_config", None), "model", "?")
        llm._cached_repr = f"LLM(model={model!r})"


@functools.lru_cache(maxsize=1)
def engine_argument_names() -> frozenset[str] | None:
    """The keyword arguments ``vllm.LLM(...)`` takes, or None where this vLLM cannot say.

    ``LLM.__init__`` names some itself and hands the rest to ``EngineArgs`` (a
    dataclass, 0.27.1-0.32.0), whose constructor refuses any other name.
    """
    try:
        with warnings.catch_warnings():  # what importing vLLM warns of is not the test's
            warnings.simplefilter("ignore")
            from vllm.engine.arg_utils import EngineArgs
            from vllm.entrypoints.llm import LLM
    except Exception:
        return None
    names = {f.name for f in dataclasses.fields(EngineArgs)}
    names |= {
        name for name, p in inspect.signature(LLM.__init__).parameters.items()
        if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }
    return frozenset(names)


def sampling_params(max_tokens: int) -> Any:
    """Decode exactly ``max_tokens`` tokens per sequence, greedily, no detokenizing.

    Greedy on purpose: with random sampling, vLLM 0.27.1-0.31.0 run the CPU sampler's
    ``compiled_random_sample`` (``@torch.compile``, inductor; v1/sample/ops/
    topk_topp_sampler.py) in the worker's first ``sample_tokens`` call, whatever
    ``enforce_eager`` says: a C++ compile of 2-10 s that outlives a short deadline
    before the test's own step runs.  All-greedy batches return from
    ``Sampler.sample`` before that sampler in every release; 0.32.0 dropped it.
    """
    from vllm import SamplingParams

    return SamplingParams(
        max_tokens=max_tokens, ignore_eos=True, detokenize=False, temperature=0.0
    )


def token_prompt(token_ids: list[int]) -> Any:
    """A prompt given as token ids (the engine has no tokenizer)."""
    return {"prompt_token_ids": token_ids}


def generate_arriving(llm: Any, prompts: list[Any], params: Any, per_step: int | Sequence[int]) -> list[Any]:
    """Like ``llm.generate``, but ``per_step`` requests arrive before each engine step.

    As under a server's clients, the decode batch grows while each step prefills only
    the newcomers.  A sequence gives the count per step (its last repeats), so a test can
    shape one step: ``[8, 120]`` makes the second step 8 decodes beside 120 newcomers.
    ``LLMEngine.add_request(request_id, prompt, params)`` / ``step()`` /
    ``has_unfinished_requests()`` are the same in 0.27.1-0.32.0.
    """
    engine = llm.llm_engine
    tag = f"enginedead-{id(prompts):x}-{time.monotonic_ns()}"
    counts = [per_step] if isinstance(per_step, int) else list(per_step)
    waiting = list(enumerate(prompts))
    done: dict[str, Any] = {}
    step = 0
    while waiting or engine.has_unfinished_requests():
        k = counts[min(step, len(counts) - 1)]
        for i, prompt in waiting[:k]:
            engine.add_request(f"{tag}-{i}", prompt, params)
        waiting = waiting[k:]
        step += 1
        for out in engine.step():
            if getattr(out, "finished", False):
                done[out.request_id] = out
    return [done[f"{tag}-{i}"] for i in range(len(prompts))]


def drive(llm: Any, waves: list[tuple[list[list[int]], Any]]) -> None:
    """Send waves of token-id prompts; each wave once every earlier request has its first token.

    As ``generate_arriving``: ``LLMEngine.add_request`` / ``step()`` /
    ``has_unfinished_requests()`` (0.27.1-0.32.0).  The engine core schedules on its
    own; a wave sent between two steps is scheduled together in the next one.
    """
    engine = llm.llm_engine
    tag = f"enginedead-drive-{time.monotonic_ns()}"
    pending = list(waves)
    sent: set[str] = set()
    started: set[str] = set()
    count = 0
    while pending or engine.has_unfinished_requests():
        if pending and sent <= started:
            prompts, params = pending.pop(0)
            for prompt in prompts:
                request_id = f"{tag}-{count}"
                count += 1
                engine.add_request(request_id, token_prompt(prompt), params)
                sent.add(request_id)
            continue
        for out in engine.step():
            outputs = getattr(out, "outputs", None)
            if getattr(out, "finished", False) or (outputs and outputs[0].token_ids):
                started.add(out.request_id)


def output_token_ids(request_output: Any) -> list[int]:
    return list(request_output.outputs[0].token_ids)
