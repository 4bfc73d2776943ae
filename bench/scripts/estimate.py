"""How well a step's end is foreseen from its progress: the estimate made halfway through real steps.

    python bench/scripts/estimate.py decode|prefill

``decode``: the shrunk Gemma-4 MoE (gemma-4-moe-mini, 16 layers) at 128 decodes a step; ``prefill``:
the same model with its context raised to 32K, one 6,144-token prompt prefilled in chunks of 1,024
tokens, the last chunks at 5K context and more.  Natural steps: nothing injected.  A thread reads the
worker's progress record (``contract.stepprogress``) every few milliseconds, as the guard does;
for each step, at the first reading with half its layers finished, it takes the estimate of when
the forward pass ends (``StepProgress.ends_in_s``), and holds it against when it did end.  Prints
one JSON line: per step, its length and the estimate's error (on the step's length, and on the time
that was left).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pytest_enginedead.contract.stepprogress import Phase, read_step_progress
from pytest_enginedead.harness.engines.offline import Engine
from pytest_enginedead.harness.engines.reaper import Reaper
from pytest_enginedead.logic.inputs.modelconfig import presets
from pytest_enginedead.logic.planning.engines import DeadlineAndFaults, EngineSpec

POLL_S = 0.002


def watch(run_dir: str, pid: int, stop: threading.Event, found: dict[int, dict[str, float]]) -> None:
    """Per step: its start, the estimate at half its layers, and its forward pass's end."""
    while not stop.is_set():
        p = read_step_progress(run_dir, pid)
        now = time.monotonic()
        if p is not None and p.phase is Phase.FORWARD and p.layers:
            step = found.setdefault(p.step, {"began": p.began})
            if not p.forward_done and "half_at" not in step and p.finished_layers >= p.layers / 2:
                ends = p.ends_in_s(now)
                if ends is not None:
                    step.update(half_at=now, predicted_end=now + ends, layers=p.layers,
                                finished=p.finished_layers)
            if p.forward_done:
                step["ended"] = p.advanced
        time.sleep(POLL_S)


def long_model() -> str:
    config = json.loads((Path(presets()["gemma-4-moe-mini"]) / "config.json").read_text())
    config["max_position_embeddings"] = 32768
    directory = Path(f"/tmp/enginedead-estimate-{time.time_ns()}") / "gemma-4-moe-long"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def run(kind: str) -> dict[str, Any]:
    if kind == "decode":
        spec = EngineSpec(presets()["gemma-4-moe-mini"], 128)
        work = [(None, 128, 8, 6)]  # (prompts, n, prompt_len, max_tokens)
    else:
        spec = EngineSpec(long_model(), 1, extra_args=(("max_model_len", 6208),
                                                       ("max_num_batched_tokens", 1024)), kv_cache_gib=1)
        work = [(None, 1, 6144, 1)]
    found: dict[int, dict[str, float]] = {}
    stop = threading.Event()
    reaper = Reaper()
    try:
        with Engine(spec, reaper=reaper).start(DeadlineAndFaults(3600, "bench (estimate)")) as engine:
            engine.drive([(engine.prompts([8] * min(spec.max_num_seqs, 8), 1), 2)])  # warm-up
            (pid,) = engine.evidence.worker_pids
            poller = threading.Thread(target=watch, args=(engine.run_dir, pid, stop, found), daemon=True)
            poller.start()
            for _, n, prompt_len, max_tokens in work:
                engine.drive([(engine.prompts([prompt_len] * n, 5), max_tokens)])
            stop.set()
            poller.join()
    finally:
        reaper.close()
    rows = []
    for number, s in sorted(found.items()):
        if "half_at" not in s or "ended" not in s:
            continue
        length, predicted = s["ended"] - s["began"], s["predicted_end"] - s["began"]
        left, left_predicted = s["ended"] - s["half_at"], s["predicted_end"] - s["half_at"]
        rows.append({"step": number, "layers": s["layers"], "at_layer": s["finished"],
                     "step_s": round(length, 4), "predicted_s": round(predicted, 4),
                     "error": round(predicted / length - 1, 4),
                     "left_s": round(left, 4),
                     "left_error": round(left_predicted / left - 1, 4) if left else None})
    return {"kind": kind, "model": spec.model, "batch": spec.max_num_seqs, "steps": rows}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1])))
