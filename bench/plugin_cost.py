"""What the installed plugin costs a pytest run that has no engine test: side by side.

A scratch suite of plain tests (nothing of the plugin's) is run with ``python -m pytest``,
alternately with the plugin (it loads through its ``pytest11`` entry point, as installed) and
with ``-p no:enginedead``; each run's wall time from start to exit.  The difference of the
medians is what the plugin adds (its import, its options, its hooks).  Also: the plugin's own
import time (``python -X importtime``), and the header it prints (none, for such a run).

    python bench/plugin_cost.py [--rounds 21] [--tests 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def suite(directory: Path, tests: int) -> None:
    lines = [f"def test_{i}():\n    assert {i} == {i}\n" for i in range(tests)]
    (directory / "test_plain.py").write_text("\n".join(lines))


def one_run(directory: Path, *extra: str) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout}{done.stderr}")
    return wall, done.stdout


def import_ms(directory: Path) -> float:
    """The plugin's cumulative import time, with pytest (and what pytest loads) imported first."""
    code = "import pytest, _pytest.terminal; import pytest_enginedead.plugin"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=directory,
                          capture_output=True, text=True, check=True)
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == "pytest_enginedead.plugin":
            return int(parts[1]) / 1000
    raise SystemExit("no import time for pytest_enginedead.plugin:\n" + done.stderr[-2000:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--tests", type=int, default=200)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="enginedead-cost-") as scratch:
        directory = Path(scratch)
        suite(directory, args.tests)
        one_run(directory)  # warm: bytecode written, files in the page cache
        one_run(directory, "-p", "no:enginedead")
        with_plugin, without = [], []
        header_lines: set[str] = set()
        for _ in range(args.rounds):
            wall, out = one_run(directory)
            with_plugin.append(wall)
            header_lines |= {ln for ln in out.splitlines() if ln.startswith("enginedead")}
            without.append(one_run(directory, "-p", "no:enginedead")[0])
        imports = sorted(import_ms(directory) for _ in range(5))
    result = {
        "tests": args.tests,
        "rounds": args.rounds,
        "with_plugin_median_s": statistics.median(with_plugin),
        "without_median_s": statistics.median(without),
        "added_ms": (statistics.median(with_plugin) - statistics.median(without)) * 1000,
        "import_ms_median": statistics.median(imports),
        "header_lines": sorted(header_lines),
        "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
