"""Stopping by pid, shared memory, and the reaper, on real processes: no vLLM.

``/dev/shm`` segments are made the way vLLM makes them (``multiprocessing.shared_memory``)
in child processes; the reaper's parent is a real process that is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pytest_enginedead.harness.engines.cleanup import (
    SHM_DIR,
    ProcRef,
    mapped_shm,
    terminate,
    unlink_shm,
)
from pytest_enginedead.harness.engines.reaper import Reaper
from tests.support.badinput import leftovers
from tests.support.downstream import assert_nothing_left

pytestmark = pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason=f"no {SHM_DIR} on this system")

#: A process that maps shared-memory segments (the first one unlinked while still mapped,
#: if asked) and says their names, then sleeps.  Its segments are not left to
#: multiprocessing's resource tracker: cleaning them up is the harness's job.
HOLDER = textwrap.dedent(
    """
    import os, sys, time
    from multiprocessing import resource_tracker, shared_memory

    def segment(name):
        try:
            return shared_memory.SharedMemory(name, create=True, size=4096, track=False)
        except TypeError:  # before Python 3.13
            shm = shared_memory.SharedMemory(name, create=True, size=4096)
            resource_tracker.unregister("/" + name, "shared_memory")
            return shm

    names, unlink_first = sys.argv[1].split(","), sys.argv[2] == "1"
    held = [segment(n) for n in names]
    if unlink_first:
        os.unlink("/dev/shm/" + names[0])  # gone, still mapped: "(deleted)" in /proc/PID/maps
    print(" ".join(names), flush=True)
    time.sleep(600)
    """
)

#: ``python -c STUBBORN``: ignores SIGTERM, so only SIGKILL ends it.
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(600)"
)


def shm_name() -> str:
    return f"enginedead-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts; whatever is left of them is killed afterwards."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def start(spawned: list[subprocess.Popen[str]], *argv: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    spawned.append(proc)
    return proc


def holder(
    spawned: list[subprocess.Popen[str]], *names: str, unlink_first: bool = False
) -> subprocess.Popen[str]:
    """A process holding the named segments, once they are mapped."""
    proc = start(spawned, sys.executable, "-c", HOLDER, ",".join(names), "1" if unlink_first else "0")
    assert proc.stdout is not None
    assert proc.stdout.readline().split() == list(names)
    return proc


@pytest.fixture
def segments() -> Iterator[list[str]]:
    """Segment names a test uses; any left in /dev/shm are removed afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        Path(SHM_DIR, name).unlink(missing_ok=True)


# --- ProcRef ------------------------------------------------------------------------------


@pytest.mark.processes
def test_procref_pins_a_process_by_creation_time(spawned: list[subprocess.Popen[str]]) -> None:
    proc = start(spawned, "sleep", "600")
    ref = ProcRef.of(psutil.Process(proc.pid))
    found = ref.process()
    assert found is not None and found.pid == proc.pid
    assert ref.create_time == psutil.Process(proc.pid).create_time()
    assert ProcRef(proc.pid, ref.create_time + 1.0).process() is None  # the pid, reused
    assert ProcRef(proc.pid, ref.create_time - 1.0).process(zombie=True) is None


@pytest.mark.processes
def test_procref_of_a_zombie_and_of_a_reaped_process(spawned: list[subprocess.Popen[str]]) -> None:
    proc = start(spawned, "true")
    ref = ProcRef.of(psutil.Process(proc.pid))
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    assert ref.process() is None  # exited: not ours to stop any more
    zombie = ref.process(zombie=True)
    assert zombie is not None and zombie.pid == proc.pid  # but still there to be reaped
    proc.wait()
    assert ref.process() is None and ref.process(zombie=True) is None


# --- terminate -------------------------------------------------------------------------------


@pytest.mark.processes
def test_terminate_ends_a_process_with_sigterm(spawned: list[subprocess.Popen[str]]) -> None:
    proc = start(spawned, "sleep", "600")
    ref = ProcRef.of(psutil.Process(proc.pid))
    t0 = time.monotonic()
    assert terminate([ref], grace_s=10.0) == []
    assert time.monotonic() - t0 < 5.0  # SIGTERM was enough: no wait for the grace period
    assert ref.process() is None  # gone: a zombie its owner (here Popen) reaps
    assert proc.wait(timeout=1) == -15


@pytest.mark.processes
def test_terminate_kills_what_ignores_sigterm(spawned: list[subprocess.Popen[str]]) -> None:
    proc = start(spawned, sys.executable, "-c", STUBBORN)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    ref = ProcRef.of(psutil.Process(proc.pid))
    t0 = time.monotonic()
    assert terminate([ref], grace_s=0.5) == []
    assert time.monotonic() - t0 >= 0.5  # it outlived SIGTERM's grace period
    assert ref.process() is None
    assert proc.wait(timeout=1) == -9


SPAWNER = """
import subprocess, sys, time
print("ready", flush=True)
while True:  # an engine core starting workers, one after another
    subprocess.Popen(["sleep", "600"])
    time.sleep(0.02)
"""


@pytest.mark.processes
def test_terminate_at_once_takes_the_whole_tree_even_while_it_spawns(
    spawned: list[subprocess.Popen[str]],
) -> None:
    """An interrupted run's stop: the tree is stopped before its children are read, so a
    process spawning one at that moment leaves no half-started child behind."""
    proc = start(spawned, sys.executable, "-c", SPAWNER)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    parent = psutil.Process(proc.pid)
    assert parent.children()
    t0 = time.monotonic()
    assert terminate([ProcRef.of(parent)], at_once=True) == []
    assert time.monotonic() - t0 < 2.0  # no grace period
    time.sleep(0.2)
    assert proc.wait(timeout=1) == -9
    left = [p for p in psutil.process_iter(["ppid", "cmdline", "status"])
            if p.info["cmdline"] == ["sleep", "600"] and p.info["status"] != psutil.STATUS_ZOMBIE
            and p.info["ppid"] in (1, proc.pid)]
    assert not left, left


SEMAPHORE = """
import multiprocessing, time
lock = multiprocessing.get_context("spawn").Lock()  # as vLLM's executor makes its worker lock
print("/dev/shm/sem." + lock._semlock.name.lstrip("/"), flush=True)
time.sleep(600)
"""


@pytest.mark.processes
@pytest.mark.parametrize("at_once", [True, False], ids=["interrupted", "ignores-sigterm"])
def test_terminate_finds_a_semaphore_made_since_the_caller_looked(
    spawned: list[subprocess.Popen[str]], at_once: bool
) -> None:
    """A multiprocessing semaphore is a ``/dev/shm`` entry its resource tracker removes; a
    tree killed with its tracker leaves it behind.  ``terminate`` reads the tree's maps when
    it kills, so the caller can remove it even if it was made after the caller last looked."""
    proc = start(spawned, sys.executable, "-c", SEMAPHORE if at_once else STUBBORN_SEMAPHORE)
    assert proc.stdout is not None
    sem = proc.stdout.readline().strip()
    assert sem.startswith(f"{SHM_DIR}/sem.mp-") and Path(sem).exists()
    found: set[str] = set()
    try:
        ref = ProcRef.of(psutil.Process(proc.pid))
        assert terminate([ref], grace_s=0.3, at_once=at_once, shm=found) == []
        proc.wait(timeout=5)
        if at_once:  # killed with its tracker: nobody else removes it
            assert Path(sem).exists()
        assert sem in found
        unlink_shm(found)
        assert not Path(sem).exists()
    finally:
        Path(sem).unlink(missing_ok=True)


STUBBORN_SEMAPHORE = SEMAPHORE.replace(
    "import multiprocessing, time",
    "import multiprocessing, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)",
)


def _sleep_forever() -> None:
    time.sleep(600)


@pytest.mark.processes
def test_terminate_leaves_reaping_to_the_owner() -> None:
    """A multiprocessing child (as vLLM's client starts its engine core) ended by pid must
    still read as ended to multiprocessing: reaped behind its back, ``is_alive()`` says
    True forever and vLLM's shutdown waits out its whole timeout on it."""
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(target=_sleep_forever, daemon=True)
    child.start()
    assert child.pid is not None
    ref = ProcRef.of(psutil.Process(child.pid))
    assert terminate([ref], grace_s=5.0) == []
    t0 = time.monotonic()
    child.join(timeout=5)
    assert not child.is_alive() and child.exitcode == -15
    assert time.monotonic() - t0 < 1.0


def test_terminate_never_touches_a_process_that_is_not_ours(bystander: psutil.Process) -> None:
    """A pid whose creation time differs (a reused pid) is left alone, whatever its title."""
    stranger = ProcRef(bystander.pid, bystander.create_time() + 5.0)
    assert terminate([stranger], grace_s=0.2) == []
    assert bystander.is_running() and bystander.status() != psutil.STATUS_ZOMBIE
    assert "VLLM::Worker" in " ".join(bystander.cmdline())


def test_terminate_of_nothing_and_of_the_gone() -> None:
    assert terminate([]) == []
    assert terminate([ProcRef(2**22 + 12345, 1.0)]) == []


# --- shared memory ---------------------------------------------------------------------------


@pytest.mark.processes
def test_mapped_shm_finds_what_our_processes_map(
    spawned: list[subprocess.Popen[str]], segments: list[str]
) -> None:
    """Mapped segments by path, a segment already unlinked included (shown "(deleted)")."""
    gone, kept = shm_name(), shm_name()
    segments += [gone, kept]
    proc = holder(spawned, gone, kept, unlink_first=True)
    ref = ProcRef.of(psutil.Process(proc.pid))
    assert not Path(SHM_DIR, gone).exists() and Path(SHM_DIR, kept).exists()
    found = mapped_shm([ref])
    assert {f"{SHM_DIR}/{gone}", f"{SHM_DIR}/{kept}"} <= found
    assert not [p for p in found if p.endswith("(deleted)")]
    assert mapped_shm([ProcRef(proc.pid, ref.create_time + 1.0)]) == set()  # not our process
    proc.kill()
    proc.wait()
    assert mapped_shm([ref]) == set()  # gone: nothing mapped
    assert mapped_shm([]) == set()


#: Intel's OpenMP as vLLM's CPU guide preloads it (intel-openmp in the venv, beside torch)
IOMP = Path(sys.prefix, "lib", "libiomp5.so")


@pytest.mark.processes
@pytest.mark.skipif(not IOMP.exists() or importlib.util.find_spec("torch") is None,
                    reason="needs torch and intel-openmp's libiomp5.so in this venv")
def test_an_iomp_registration_of_a_killed_process_is_found_and_removed(
    spawned: list[subprocess.Popen[str]],
) -> None:
    """libiomp5 registers a process in /dev/shm without mapping the file and removes it only at a
    clean exit: a killed engine process (iomp preloaded) left one per process behind."""
    code = ("import torch, sys; a = torch.ones(300, 300); (a @ a).sum(); print('ready', flush=True); "
            "sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "LD_PRELOAD": str(IOMP)})
    spawned.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    ref = ProcRef.of(psutil.Process(proc.pid))
    registered = {str(p) for p in Path(SHM_DIR).glob(f"__KMP_REGISTERED_LIB_{proc.pid}_*")}
    assert registered, "libiomp5 registered no file: this test's premise is gone"
    found = mapped_shm([ref])
    assert registered <= found
    assert mapped_shm([ProcRef(proc.pid, ref.create_time + 1.0)]) == set()  # not our process: not ours
    proc.kill()
    proc.wait()
    assert all(Path(p).exists() for p in registered)  # a kill skips its exit handler
    assert set(unlink_shm(found)) >= registered
    assert not any(Path(p).exists() for p in registered)


def test_unlink_shm_removes_only_dev_shm_entries(tmp_path: Path, segments: list[str]) -> None:
    ours = shm_name()
    segments.append(ours)
    Path(SHM_DIR, ours).write_bytes(b"x")
    outside = tmp_path / ours
    outside.write_bytes(b"x")
    nested = Path(SHM_DIR, "..", "tmp", ours)
    missing = f"{SHM_DIR}/{shm_name()}"
    removed = unlink_shm([f"{SHM_DIR}/{ours}", str(outside), str(nested), missing])
    assert removed == [f"{SHM_DIR}/{ours}"]
    assert not Path(SHM_DIR, ours).exists()
    assert outside.exists()  # never outside /dev/shm
    assert unlink_shm([f"{SHM_DIR}/{ours}"]) == []  # already gone: not an error


# --- the reaper ------------------------------------------------------------------------------

#: A harness process: starts a reaper and an engine-like child that maps a segment, registers
#: the child and a second segment nobody maps, says what it made, and waits to be killed.
PARENT = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    import psutil
    from pytest_enginedead.harness.engines.reaper import Reaper
    from pytest_enginedead.process.pinned import ProcRef

    holder, mapped, listed, run_dir = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    reaper = Reaper()
    child = subprocess.Popen([sys.executable, "-c", holder, mapped, "0"], stdout=subprocess.PIPE, text=True)
    child.stdout.readline()
    with open("/dev/shm/" + listed, "wb") as f:
        f.write(b"x")
    ref = ProcRef.of(psutil.Process(child.pid))
    reaper.track("engine", [ref], {"/dev/shm/" + listed}, run_dir)
    print(json.dumps({"child": [ref.pid, ref.create_time], "reaper": reaper.proc.pid,
                      "registry": reaper.registry}), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.processes
def test_reaper_ends_the_engines_of_a_harness_that_died(
    spawned: list[subprocess.Popen[str]], segments: list[str], bystander: psutil.Process
) -> None:
    """SIGKILL the harness: its reaper ends the registered processes and removes the shm
    entries, both the listed one and the one the process had mapped, and the engine's run
    directory; then it exits."""
    mapped, listed = shm_name(), shm_name()
    segments += [mapped, listed]
    run_dir = tempfile.mkdtemp(prefix="enginedead-")
    Path(run_dir, "steps-1.jsonl").write_text("")
    parent = start(spawned, sys.executable, "-c", PARENT, HOLDER, mapped, listed, run_dir)
    assert parent.stdout is not None
    made = json.loads(parent.stdout.readline())
    child = ProcRef(*made["child"])
    reaper = psutil.Process(made["reaper"])
    spawned_child = child.process()
    assert spawned_child is not None and spawned_child.ppid() == parent.pid
    time.sleep(0.6)  # the reaper polls its parent: it must not act while the parent lives
    assert child.process() is not None and reaper.is_running()
    assert Path(SHM_DIR, mapped).exists() and Path(SHM_DIR, listed).exists()

    parent.kill()
    parent.wait()
    assert_nothing_left(
        [child], {f"{SHM_DIR}/{mapped}", f"{SHM_DIR}/{listed}"}, bystander, within_s=10, require_shm=True
    )
    reaper.wait(timeout=10)  # its work done, the reaper exits
    assert not os.path.exists(made["registry"])
    assert not os.path.exists(run_dir)


@pytest.mark.processes
def test_reaper_closed_normally_stops_nothing(spawned: list[subprocess.Popen[str]]) -> None:
    """The harness ends cleanly: the reaper goes, the processes it tracked are left alone."""
    proc = start(spawned, "sleep", "600")
    ref = ProcRef.of(psutil.Process(proc.pid))
    reaper = Reaper()
    try:
        reaper.track("a", [ref], set())
        registered = json.loads(Path(reaper.registry).read_text())
        assert registered == {"procs": [[ref.pid, ref.create_time]], "shm": [], "dirs": [],
                              "starting": False, "older": []}
        reaper.track("b", [], {"/dev/shm/psm_x"}, "/tmp/enginedead-b")  # a second engine adds, not replaces
        both = json.loads(Path(reaper.registry).read_text())
        assert both == {
            "procs": [[ref.pid, ref.create_time]], "shm": ["/dev/shm/psm_x"], "dirs": ["/tmp/enginedead-b"],
            "starting": False, "older": [],
        }
        reaper.forget("a")
        assert json.loads(Path(reaper.registry).read_text())["procs"] == []
        watchdog = psutil.Process(reaper.proc.pid)
        assert watchdog.is_running()
    finally:
        reaper.close()
    assert reaper.proc.returncode is not None  # the watchdog is gone
    assert not os.path.exists(reaper.registry)
    assert ref.process() is not None  # and stopped nothing on its way out
    os.kill(proc.pid, signal.SIGKILL)


#: A harness killed while an engine starts: a child it started before (not the engine's), then,
#: inside ``starting``, an engine-like child that starts one of its own; it says the pids.
MID_START = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from pytest_enginedead.harness.engines.reaper import Reaper

    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    reaper = Reaper()
    before = subprocess.Popen(sleeper)
    with reaper.starting("engine"):
        core = subprocess.Popen([sys.executable, "-c",
            "import subprocess, sys, time; w = subprocess.Popen(sys.argv[1:]); print(w.pid, flush=True); "
            "time.sleep(600)", *sleeper], stdout=subprocess.PIPE, text=True)
        worker = int(core.stdout.readline())
        time.sleep(1.0)  # the reaper looks every 0.25 s
        print(json.dumps({"before": before.pid, "core": core.pid, "worker": worker}), flush=True)
        time.sleep(600)
    """
)


@pytest.mark.processes
def test_the_reaper_ends_an_engine_whose_harness_died_while_it_started(
    spawned: list[subprocess.Popen[str]]
) -> None:
    """Killed mid-start, before the harness knew the engine's processes by pid: the reaper ends
    what was born during the start (the core and the worker it started) and leaves the harness's
    older child alone."""
    parent = start(spawned, sys.executable, "-c", MID_START)
    assert parent.stdout is not None
    made = json.loads(parent.stdout.readline())
    procs = {name: psutil.Process(pid) for name, pid in made.items()}
    try:
        parent.kill()
        parent.wait()
        _, alive = psutil.wait_procs([procs["core"], procs["worker"]], timeout=15)
        assert not alive, alive
        assert procs["before"].is_running() and procs["before"].status() != psutil.STATUS_ZOMBIE
    finally:
        for proc in procs.values():
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.mark.processes
def test_the_reaper_starts_cleanly_and_leaves_nothing(private_tmp: Path) -> None:
    """The reaper starts without runpy's RuntimeWarning; its registry goes with it."""
    script = ("import time\nfrom pytest_enginedead.harness.engines.reaper import Reaper\n"
              "r = Reaper()\ntime.sleep(1.0)\nassert r.proc.poll() is None\nr.close()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the reaper shares this stderr: nothing from runpy, nothing at all
    assert leftovers(private_tmp) == []
