"""pytest-xdist without engines: cores per worker, groups per engine configuration, the header,
a worker that dies; and every input's bad values alike with and without ``-n 2``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_enginedead.logic import releases
from pytest_enginedead.logic.planning.engines import EngineSpec, GuardSpec
from pytest_enginedead.pytest_plugin import distributed
from pytest_enginedead.pytest_plugin.distributed import (
    cpu_bind,
    dist_note,
    group_name,
    item_group,
    worker_index,
)
from pytest_enginedead.pytest_plugin.workerplan import EngineUses, WorkerEnded, WorkerPlan
from tests.support import examples
from tests.support.badinput import (
    ENGINE,
    FIXTURES,
    LONG_MODEL,
    OK,
    SERVER,
    TEST,
    Alike,
    assert_alike_with_and_without_xdist,
    config,
    leftovers,
    model,
    returning,
)
from tests.support.downstream import Downstream


class _Config:
    """Just enough of pytest.Config for cpu_bind."""

    def __init__(self, workerid: str | None, count: int) -> None:
        if workerid is not None:
            self.workerinput = {"workerid": workerid, "workercount": count}


@pytest.mark.parametrize(
    ("workerid", "count", "cpus", "expected"),
    [
        (None, 0, [0, 1], None),  # not under xdist: vLLM decides
        ("gw0", 2, [0, 1], "0"),
        ("gw1", 2, [0, 1], "1"),
        ("gw1", 2, [0, 1, 2, 3], "2,3"),
        ("gw2", 3, [0, 1], "0"),  # more workers than cores: round-robin
        ("gw0", 1, [4, 5], "4,5"),
    ],
)
def test_each_worker_gets_its_own_cores(workerid, count, cpus, expected) -> None:
    assert cpu_bind(_Config(workerid, count), cpus) == expected  # type: ignore[arg-type]


def test_worker_index() -> None:
    assert worker_index(_Config(None, 0)) is None  # type: ignore[arg-type]
    assert worker_index(_Config("gw3", 4)) == (3, 4)  # type: ignore[arg-type]
    assert worker_index(_Config("odd", 2)) == (0, 2)  # type: ignore[arg-type]


def test_group_name_is_one_per_configuration() -> None:
    a = EngineSpec("/m/tiny", 8)
    assert group_name(a) == group_name(EngineSpec("/m/tiny", 8))  # stable: workers agree
    assert group_name(a).startswith("enginedead-bs8-")
    others = [
        EngineSpec("/m/tiny", 64), EngineSpec("/m/other", 8), EngineSpec("/m/tiny", 8, guard=GuardSpec(60.0)),
    ]
    assert len({group_name(s) for s in [a, *others]}) == 4


class _Item:
    """Just enough of pytest.Item for item_group: its xdist_group marks."""

    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self.marks = [m.mark for m in marks]

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        return [m for m in self.marks if m.name == name]


def test_item_group_joins_engine_configuration_and_xdist_group() -> None:
    spec = EngineSpec("/m/tiny", 8)
    assert item_group(_Item(), None) is None  # type: ignore[arg-type]  # xdist decides
    assert item_group(_Item(), spec) == group_name(spec)  # type: ignore[arg-type]
    mine = pytest.mark.xdist_group("db")
    assert item_group(_Item(mine), None) == "db"  # type: ignore[arg-type]
    assert item_group(_Item(mine), spec) == f"db_{group_name(spec)}"  # type: ignore[arg-type]
    by_name = pytest.mark.xdist_group(name="zz")
    assert item_group(_Item(by_name, mine), None) == "db_zz"  # type: ignore[arg-type]  # sorted


def config_for_note(
    xdist: bool = True, numprocesses: int | None = 2, dist: str = "load", worker: bool = False
) -> Any:
    config = SimpleNamespace(
        pluginmanager=SimpleNamespace(hasplugin=lambda name: xdist and name == "xdist"),
        option=SimpleNamespace(numprocesses=numprocesses, dist=dist),
    )
    if worker:
        config.workerinput = {"workerid": "gw0"}
    return config


def test_dist_note_only_when_groups_would_be_split() -> None:
    note = dist_note(config_for_note())
    assert note is not None and note.startswith("--dist load: ") and note.endswith("use --dist loadgroup")
    assert "--dist worksteal" in (dist_note(config_for_note(dist="worksteal")) or "")
    assert dist_note(config_for_note(dist="loadgroup")) is None
    assert dist_note(config_for_note(dist="no")) is None
    assert dist_note(config_for_note(numprocesses=None)) is None  # -n not given
    assert dist_note(config_for_note(xdist=False)) is None
    assert dist_note(config_for_note(worker=True)) is None  # the controller says it, once


def test_a_worker_publishes_its_plan_in_a_file_of_its_own(tmp_path: Path) -> None:
    config: Any = SimpleNamespace(workerinput={"workerid": "gw1", distributed.GROUPS_KEY: str(tmp_path)})
    plan = WorkerPlan({"t.py::a": "g1", "t.py::c": "g1"}, 2, EngineUses(fixtures=True, servers=True))
    published = distributed.publish_plan(config, plan)
    assert published is False  # the controller did not say it checks: the worker checks for itself
    assert [p.name for p in tmp_path.iterdir()] == ["gw1.json"]
    assert WorkerPlan.from_json((tmp_path / "gw1.json").read_text()) == plan
    assert distributed._published(str(tmp_path), "gw1") == plan
    assert distributed._published(str(tmp_path), "gw9") == WorkerPlan()  # none written: nothing planned
    config.workerinput[distributed.CHECKS_KEY] = True
    assert distributed.publish_plan(config, WorkerPlan(engine_tests=1)) is True
    bare: Any = SimpleNamespace(workerinput={})
    assert distributed.publish_plan(bare, plan) is False
    gone: Any = SimpleNamespace(workerinput={
        "workerid": "gw2", distributed.GROUPS_KEY: str(tmp_path / "gone"), distributed.CHECKS_KEY: True,
    })
    assert distributed.publish_plan(gone, WorkerPlan()) is False  # not reachable from here (a remote worker)


def test_how_a_worker_ended_travels_whole() -> None:
    for ended in (WorkerEnded(usage=("enginedead: bad",)), WorkerEnded(exit_message="stop", returncode=3)):
        assert WorkerEnded.from_wire(json.loads(json.dumps(ended.to_wire()))) == ended
    assert WorkerEnded.from_wire(None) is None


@pytest.mark.processes
def test_header_says_when_dist_is_not_loadgroup(downstream: Downstream) -> None:
    result = downstream.copy(examples.USES_PLUGIN).run("-n", "2", plugins=["xdist"], in_subprocess=True,
                                                       timeout=120)
    result.stdout.fnmatch_lines(["enginedead: policy=*", "enginedead: --dist load: *use --dist loadgroup"])
    result.assert_outcomes(passed=1)


# --- a worker that dies anyway, or ends its session early -----------------------------------------

DYING = """import ctypes
import os
import signal


def test_crashes():
    ctypes.string_at(0)  # SIGSEGV: faulthandler has last words


def test_is_killed():
    os.kill(os.getpid(), signal.SIGKILL)  # no last words: only how it ended


def test_lives():
    pass
"""


@pytest.mark.processes
def test_a_worker_that_dies_is_its_tests_failure_with_its_last_words(downstream: Downstream) -> None:
    """A worker process that dies mid-test is that test's failure (xdist's), and the failure says
    how the process ended and what faulthandler wrote, the crashing test's frame first; never an
    INTERNALERROR.  Without the plugin's hook the report says only "worker 'gw0' crashed"."""
    downstream.pytester.makepyfile(test_dying=DYING)
    result = downstream.run("-n", "2", plugins=["xdist"], in_subprocess=True, timeout=120)
    assert "INTERNALERROR" not in result.text
    result.assert_outcomes(failed=2, passed=1)
    out = result.stdout.str()
    crashed = out[out.index("crashed while running 'test_dying.py::test_crashes'"):]
    assert "process was killed by SIGSEGV (a crash)" in crashed
    assert "its last words (faulthandler, the crashing thread first):" in crashed
    first = crashed.split("its last words")[1].splitlines()[1:4]
    assert first[0].strip() == "Fatal Python error: Segmentation fault", first
    assert first[1].strip().startswith("Current thread"), first
    assert "in string_at" in first[2] or "test_dying.py" in first[2], first
    killed = out[out.index("crashed while running 'test_dying.py::test_is_killed'"):]
    assert "process was killed by SIGKILL (the kernel's OOM killer, or a kill -9)" in killed
    assert "it left no last words" in killed


@pytest.mark.processes
def test_a_worker_ended_by_pytest_exit_ends_the_run_as_without_xdist(downstream: Downstream) -> None:
    """``pytest.exit(..., returncode=3)`` in a test on a worker: without the plugin, xdist meets the
    tests still assigned to that worker with ``assert not crashitem`` (INTERNALERROR); with it the
    controller ends as a run without ``-n`` does: the reason, the return code."""
    downstream.pytester.makepyfile(test_exit="""
        import pytest


        def test_exits():
            pytest.exit("the suite decided to stop", returncode=3)


        def test_after():
            pass
    """)
    plain = downstream.run()
    n2 = downstream.run("-n", "2", "--dist", "loadfile", plugins=["xdist"], in_subprocess=True, timeout=120)
    for result in (plain, n2):
        assert result.ret == 3, result.text[-3000:]
        assert "Exit: the suite decided to stop" in result.text
        assert "INTERNALERROR" not in result.text and "Traceback" not in result.text


# --- output paths and the xdist input: each case without -n and with -n 2, alike ----------------------

#: three engine tests whose deadlines vLLM cannot hold (1e12 s): from the policy, a marker, a factory
DEADLINES = """import pytest


def test_policy_deadline(vllm_engine):
    pass


@pytest.mark.enginedead_timeout(1e12)
def test_marker_deadline(vllm_engine):
    pass


def test_factory_deadline(vllm_engine_factory):
    vllm_engine_factory(8, timeout_s=10**12)
"""
BOUND = (f"must be at most {releases.MAX_DEADLINE_S} s, the longest wait vLLM can make "
         "(Python's threading.TIMEOUT_MAX)")
#: a conftest (standing for any plugin) that refuses the collection; "enginedead: " lets usage_line read it
REFUSING_CONFTEST = ("import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
                     "    raise pytest.UsageError('enginedead: a conftest refused this collection')\n")

ALIKE = [
    # --- shards and durations: refused on the controller as on a plain run ------------
    Alike("shard-out-of-range", ("--enginedead-shard='2/1' (from command line)", "there is no shard 2 of 1"),
          args=("--enginedead-shard=2/1",), suite=ENGINE),
    Alike("durations-other-release", ("was recorded on vLLM '0.1.0', this run has",),
          args=("--enginedead-shard=1/2", "--enginedead-durations=d.json"), suite=ENGINE,
          files={"d.json": '{"enginedead_durations": 1, "vllm": "0.1.0", "tests": {}}'}),
    # --- the report path (never replace a device, never lose a report) ----------------
    Alike("report-char-device", (), args=("--enginedead-report={repo}/nulldev",), nodes={"nulldev": "chr"},
          kind=OK),
    Alike("report-dev-null", (), args=("--enginedead-report=/dev/null",), kind=OK),
    Alike("report-fifo", ("--enginedead-report='", "/fifo' (from command line): '",
                          "/fifo' is a FIFO that nothing reads; writing to it would wait forever"),
          args=("--enginedead-report={repo}/fifo",), nodes={"fifo": "fifo"}),
    Alike("report-dangling-dir", ("--enginedead-report='", "(from command line): '",
                                  "/gone' is a symbolic link to '/nonexistent-enginedead-dir', "
                                  "which does not exist; make that directory or give another path"),
          args=("--enginedead-report={repo}/gone/r.json",),
          nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    Alike("env-report-dangling-dir", ("ENGINEDEAD_REPORT='gone/sub/r.json' (from environment):",
                                      "gone' is a symbolic link to"),
          env={"ENGINEDEAD_REPORT": "gone/sub/r.json"}, nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    Alike("report-in-proc", ("--enginedead-report='/proc/x.json' (from command line): cannot be created: "
                             "making a file in '/proc' failed",
                             "(/proc is the kernel's; it takes no new files)"),
          args=("--enginedead-report=/proc/x.json",), suite=ENGINE),
    Alike("env-report-in-sys", ("ENGINEDEAD_REPORT='/sys/x.json' (from environment): cannot be created",
                                "(/sys is the kernel's; it takes no new files)"),
          env={"ENGINEDEAD_REPORT": "/sys/x.json"}, suite=ENGINE),
    # --- the model, checked once in the controller under xdist ------------------------------
    Alike("model-negative-vocab",
          ("(from command line): ", '/m/config.json: "vocab_size": -1 must be at least 1'),
          args=("--enginedead-model=m",), files=model(config(vocab_size=-1)), suite=ENGINE),
    Alike("model-unknown-architecture", (f"{FIXTURES}/unknown-arch/config.json names architecture "
                                         "NoSuchModelForCausalLM, which vLLM",
                                         "--enginedead-model=", "(from command line): "),
          args=(f"--enginedead-model={FIXTURES / 'unknown-arch'}",), suite=SERVER),
    Alike("model-long-path", ('"vocab_size": -1 must be at least 1',
                              "[long paths shortened; -v shows them whole]"),
          args=(f"--enginedead-model={LONG_MODEL}",), files=model(config(vocab_size=-1), LONG_MODEL),
          suite=ENGINE),
    Alike("model-long-path-verbose", (f'{{repo}}/{LONG_MODEL}/config.json: "vocab_size": -1',),
          args=(f"--enginedead-model={LONG_MODEL}", "-v"), files=model(config(vocab_size=-1), LONG_MODEL),
          suite=ENGINE),
    Alike("a-plugin-refuses-the-collection", ("enginedead: a conftest refused this collection",),
          files={"conftest.py": REFUSING_CONFTEST}, suite=ENGINE),
    # --- deadlines vLLM cannot hold, and a policy's text ----------------------------------------
    Alike("deadlines-beyond-the-bound",
          (f"policy pol_big: timeout_s(CPU, 8) returned 1000000000000.0; a deadline {BOUND}",
           f"@pytest.mark.enginedead_timeout: seconds=1000000000000.0 {BOUND}",
           f"vllm_engine_factory: timeout_s=1000000000000 {BOUND}"),
          args=("--enginedead-policy=pol_big:p", "--enginedead-batch-sizes=8"),
          files=returning("pol_big", "1e12"), suite=DEADLINES, kind=TEST),
    Alike("policy-returns-text", ("policy pol_600: timeout_s(CPU, 8) returned '600', not a number of seconds "
                                  "(str; give an int or a float)",),
          args=("--enginedead-policy=pol_600:p", "--enginedead-batch-sizes=8"),
          files=returning("pol_600", "'600'"), suite=ENGINE, kind=TEST),
]


@pytest.mark.processes
@pytest.mark.parametrize("case", ALIKE, ids=[c.id for c in ALIKE])
def test_alike_with_and_without_xdist(
    downstream: Downstream, no_engine: list[str], stub_registry: Path, private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch, case: Alike,
) -> None:
    """Without ``-n`` and with ``-n 2`` (where the controller collects nothing), alike."""
    assert_alike_with_and_without_xdist(downstream, stub_registry, private_tmp, monkeypatch, case)
    if case.id == "model-unknown-architecture":  # under -n 2 the controller asked, once; no worker did
        assert stub_registry.read_text().split() == ["controller"]


@pytest.mark.processes
def test_xdist_leaves_no_groups_directory(downstream: Downstream, private_tmp: Path) -> None:
    """The scheduler's groups directory is removed at the end of an xdist run."""
    result = downstream.copy(examples.PLAIN).run("-n", "2", "--dist", "loadgroup", plugins=["xdist"],
                                                 in_subprocess=True, timeout=120)
    assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
    assert leftovers(private_tmp) == []
