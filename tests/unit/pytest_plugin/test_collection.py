"""Collection: batch sizes as parameters, and ``--enginedead-shard K/N`` run as a downstream
repo would run it, collecting only (no engine starts to tell which tests a shard keeps)."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from pytest_enginedead.compat import registry, versions
from pytest_enginedead.logic.planning.sharding import Durations
from tests.support import examples
from tests.support.downstream import Downstream

# --- batch sizes: marker > command line > default ------------------------------------------

def test_batch_size_parametrization(downstream: Downstream) -> None:
    """engine_batch_size runs at each size, ids bsN; the marker overrides the option."""
    default = downstream.copy(examples.SIZED).run("--collect-only", "-q")
    default.stdout.fnmatch_lines(
        [
            "test_sized.py::test_default[[]bs8[]]",
            "test_sized.py::test_default[[]bs64[]]",
            "test_sized.py::test_marked[[]bs2[]]",
            "test_sized.py::test_marked[[]bs4[]]",
        ]
    )
    flagged = downstream.run("--enginedead-batch-sizes=3", "-v")
    flagged.assert_outcomes(passed=3)
    flagged.stdout.fnmatch_lines(["*test_default[[]bs3[]] PASSED*"])
    assert "test_marked[bs3]" not in flagged.stdout.str()


# --- the plugin: a downstream suite of three engine configurations and plain tests ----------------

SUITE = '''
import pytest


def test_plain_1():
    pass


def test_plain_2():
    pass


@pytest.mark.enginedead_batch_sizes(2, 8)
def test_a_first(vllm_engine):
    pass


@pytest.mark.enginedead_batch_sizes(8)
def test_a_second(vllm_engine):
    pass


@pytest.mark.enginedead_guard(hang_s=5)
def test_b_guarded(vllm_engine):
    pass


@pytest.mark.enginedead_batch_sizes(4)
def test_c_server(vllm_server):
    pass


def test_plain_3():
    pass
'''


@pytest.fixture
def suite(downstream: Downstream, monkeypatch: pytest.MonkeyPatch) -> Downstream:
    """The suite above; the model check asks a stand-in registry (no vLLM import to collect)."""
    monkeypatch.setattr(registry, "known_architectures", lambda: {"LlamaForCausalLM"})
    downstream.pytester.makepyfile(test_suite=SUITE)
    return downstream


def collected(downstream: Downstream, *args: str) -> tuple[list[str], str]:
    result = downstream.run("--collect-only", "-q", *args)
    assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
    ids = [ln for ln in result.stdout.lines if re.match(r"test_\w+\.py::", ln)]
    return ids, result.stdout.str()


def configuration(nodeid: str) -> str:
    """Which engine the suite's test gets: a, b (guarded), c (server), or its own name (plain)."""
    name = nodeid.split("::")[1]
    return name.split("_")[1] if not name.startswith("test_plain") else name


@pytest.mark.parametrize("count", [2, 3])
def test_shards_of_a_suite_hold_every_test_once_and_each_engine_whole(suite: Downstream, count: int) -> None:
    everything, _ = collected(suite)
    assert len(everything) == 9  # the guarded test runs at the default 8 and 64
    shards = []
    for k in range(1, count + 1):
        ids, out = collected(suite, f"--enginedead-shard={k}/{count}")
        assert f"enginedead: shard {k}/{count}: {len(ids)} tests, " in out
        shards.append(ids)
    assert sorted(itertools.chain.from_iterable(shards)) == sorted(everything)
    for config in ("a", "b", "c"):
        assert sum(any(configuration(t) == config for t in ids) for ids in shards) == 1, (config, shards)
    engines = [sum(1 for c in {configuration(t) for t in ids} if c in "abc") for ids in shards]
    assert sum(engines) == 3  # no configuration starts in two shards


def test_one_shard_of_one_is_the_whole_suite(suite: Downstream) -> None:
    everything, _ = collected(suite)
    ids, out = collected(suite, "--enginedead-shard=1/1")
    assert ids == everything
    assert ("enginedead: shard 1/1: 9 tests, 3 engine configurations, "
            "balanced by tests and engine starts") in out


def test_durations_recorded_by_one_run_balance_the_next(suite: Downstream) -> None:
    """``--enginedead-store-durations`` writes what ``--enginedead-durations`` reads, ``{vllm}``
    naming the release; the guarded engine's tests recorded as heavy get a shard of their own."""
    release = versions.installed_version() or "none"
    path = suite.path / f"durations-{release}.json"
    everything, _ = collected(suite)
    seconds = {t: 500.0 if configuration(t) == "b" else 2.0 for t in everything}
    path.write_text(Durations(seconds, release).to_json())
    ids, out = collected(suite, "--enginedead-shard=1/2", "--enginedead-durations=durations-{vllm}.json")
    assert ids == ["test_suite.py::test_b_guarded[bs8]", "test_suite.py::test_b_guarded[bs64]"], ids
    assert "balanced by recorded durations" in out


@pytest.mark.processes
def test_durations_are_stored_under_xdist_for_the_shard_that_ran(downstream: Downstream) -> None:
    """Under ``-n 2`` each shard keeps the same tests, and the controller writes every test's time."""
    downstream.pytester.makepyfile(test_plain="""
        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_p(i):
            pass
    """)
    plain, _ = collected(downstream, "--enginedead-shard=2/3")
    result = downstream.run("-p", "xdist", "-n", "2", "--enginedead-shard=2/3",
                            "--enginedead-store-durations=d.json", in_subprocess=True, timeout=120,
                            report=True)
    assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
    assert result.outcomes.get("passed") == len(plain) == 2
    assert result.report is not None  # the report says which shard, and its tests (for a merge)
    assert result.report["shard"] == {
        "index": 2, "count": 3, "collected": 6, "tests": plain, "engine_configurations": 0,
        "balanced_by": "tests and engine starts",
    }
    data = json.loads((downstream.path / "d.json").read_text())
    assert sorted(data["tests"]) == sorted(plain)
    assert data["vllm"] == (versions.installed_version() or "none") and "machine" in data
