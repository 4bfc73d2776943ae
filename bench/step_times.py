"""Decode step times of the models the project runs, as ``enginedead calibrate`` measures them.

``python bench/run.py steps`` runs ``enginedead calibrate --batch-sizes ... --json`` once per model
(the decode-only calibration: one engine, every batch size in rounds) and keeps each batch size's
median step and the engine's start.  The benchmarks page's step-time table is made from this
record (``bench/engine_figures.py``), so the page shows what a user's own ``calibrate`` would print
on the same machine.

``python bench/run.py ranks`` measures the same steps at one rank and at two, one model after the
other and each rank count in turn on the same box, so that the two are read side by side.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: decode batch sizes: one sequence, a small batch, and up to vLLM's CPU server default (128)
BATCHES = (1, 8, 32, 64, 128)

#: measured steps per batch size (after calibrate's warm-up)
STEPS = 8

#: (name on the page, --model): the bundled models and the suite's heavy Llama
MODELS = (
    ("tiny-llama", "tiny-llama"),
    ("heavy-llama", str(ROOT / "fixtures" / "heavy-llama")),
    ("gemma-4-moe-mini", "gemma-4-moe-mini"),
)

COMMAND = (f"enginedead calibrate --model MODEL --batch-sizes {','.join(map(str, BATCHES))} "
           f"--steps {STEPS} --json")


#: (model, batch sizes) measured at one rank and at two
RANKED = (("tiny-llama", (8, 64)), ("gemma-4-moe-mini", (32,)))

RANKS_COMMAND = (f"enginedead calibrate --model MODEL --batch-sizes N,N --steps {STEPS} "
                 "--tensor-parallel-size RANKS --json")


def calibrate(model: str, batches: tuple[int, ...] = BATCHES, ranks: int = 1) -> dict[str, Any]:
    """One decode-only calibration of ``model``, its JSON answer."""
    cmd = [sys.executable, "-m", "pytest_enginedead.command", "calibrate", "--model", model,
           "--batch-sizes", ",".join(map(str, batches)), "--steps", str(STEPS), "--json",
           "--tensor-parallel-size", str(ranks)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3000)
    if out.returncode != 0:
        raise RuntimeError(f"calibrate --model {model} exited {out.returncode}:\n{out.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def medians(answer: dict[str, Any], label: str) -> dict[str, Any]:
    """A calibration's median step per batch size and its engine's start, in seconds (printed)."""
    rows = {str(r["batch_size"]): r["p50_s"] for r in answer["results"]}
    print(f"  {label}: " + ", ".join(f"batch {b} {s:.3f} s" for b, s in rows.items()), flush=True)
    return {"p50_s": rows, "start_s": max(r["start_s"] for r in answer["results"])}


def bench_steps() -> dict[str, Any]:
    """Each model's median decode step per batch size, its steps measured and its engine's start."""
    models: dict[str, Any] = {}
    machine: dict[str, Any] | None = None
    for name, model in MODELS:
        answer = calibrate(model)
        machine = answer["machine"]
        models[name] = {**medians(answer, name), "vllm": answer["vllm"],
                        "steps": {str(r["batch_size"]): r["steps"] for r in answer["results"]}}
    return {"batches": list(BATCHES), "models": models, "machine": machine, "command": COMMAND}


def bench_ranks() -> dict[str, Any]:
    """Per model: its median decode step per batch size and its start, at one rank and at two."""
    models: dict[str, Any] = {}
    machine: dict[str, Any] | None = None
    for name, batches in RANKED:
        models[name] = {}
        for ranks in (1, 2):
            answer = calibrate(name, batches, ranks)
            machine = answer["machine"]
            models[name][str(ranks)] = medians(answer, f"{name}, {ranks} rank(s)")
    return {"models": models, "machine": machine, "command": RANKS_COMMAND}
