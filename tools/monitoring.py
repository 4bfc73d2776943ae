"""Write the monitoring files shipped with the package from the code that defines them.

    python tools/monitoring.py [--check]

``pytest_enginedead/monitoring/``: ``enginedead-rules.yml`` (a Prometheus rules file) and
``enginedead-prometheusrule.yaml`` (the same rules as a Kubernetes PrometheusRule), both from
``logic.metrics.alerts``; ``enginedead-dashboard.json`` (Grafana) from ``logic.metrics.dashboard``.
With ``--check`` it writes nothing and exits 1 naming each stale file (``make docs-tables`` writes them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_enginedead.logic.metrics import alerts, dashboard  # noqa: E402

HERE = ROOT / "pytest_enginedead" / "monitoring"

#: each file, and what writes it
FILES = {
    "enginedead-rules.yml": alerts.rules_file,
    "enginedead-prometheusrule.yaml": alerts.prometheus_rule,
    "enginedead-dashboard.json": dashboard.dashboard_file,
}


def stale() -> list[str]:
    """The files whose committed text is not what the code makes now."""
    return [name for name, make in FILES.items()
            if not (HERE / name).exists() or (HERE / name).read_text() != make()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for name in old:
            print(f"{HERE / name}: stale; run `python tools/monitoring.py` (make docs-tables)",
                  file=sys.stderr)
        return 1 if old else 0
    HERE.mkdir(exist_ok=True)
    for name, make in FILES.items():
        (HERE / name).write_text(make())
        print(f"{HERE / name}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
