"""The probe that tells slow from hung, and the serving side's exit status: pure logic and real processes.

A "server" here is a real process tree built from ``bash -c 'exec -a TITLE ...'``:
a front process that listens on a port, a ``VLLM::EngineCore`` below it and a
``VLLM::Worker`` below that, busy or asleep.  Only vLLM is missing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pytest_enginedead import command
from pytest_enginedead.contract.guardfiles import (
    GuardState,
    guard_state_path,
    guard_state_pid,
    read_guard_state,
    state_dir,
    write_guard_state,
)
from pytest_enginedead.contract.names import ENV_DIR, EXIT_DEAD, EXIT_ENV, EXIT_HUNG, STATE_DIR_ENV
from pytest_enginedead.harness import probe
from pytest_enginedead.invllm import exiting, guard
from pytest_enginedead.logic import probes
from pytest_enginedead.logic.guardconfig import GuardConfig
from pytest_enginedead.logic.modelconfig import BUNDLED_MODEL

HANG_S = 5.0


def state(**kw: object) -> GuardState:
    base: dict[str, object] = dict(pid=10, front=9, hang_s=HANG_S, policy="reference", updated=100.0)
    base.update(kw)
    return GuardState(**base)  # type: ignore[arg-type]


def in_step(**kw: object) -> GuardState:
    base: dict[str, object] = dict(in_step=True, method="execute_model", step=5, batch=64, deadline_s=2.0,
                                   cap_s=1240.0, sent=90.0, busy_at=100.0, verdict="SLOW", cores=0.98,
                                   worker=11)
    base.update(kw)
    return state(**base)


# --- judge: the answer from a guard's state --------------------------------------------


def test_a_slow_step_past_its_deadline_is_alive() -> None:
    answer = probe.judge(in_step(), now=100.3, busy=None)
    assert answer.alive and answer.exit_code == 0
    assert "alive, computing: step 5 (batch 64) has run 10.3 s (deadline 2 s)" in answer.why
    assert "98 % CPU" in answer.why and "waits up to 1240 s" in answer.why


def test_idle_inside_a_step_is_alive_until_hang_s_then_hung() -> None:
    idle = in_step(verdict="HUNG", busy_at=100.0, updated=104.0)
    early = probe.judge(idle, now=104.2, busy=None)
    assert early.alive and "idle 4.2 s, hung at 5 s" in early.why
    late = probe.judge(in_step(verdict="HUNG", busy_at=100.0, updated=105.0), now=105.2, busy=None)
    assert not late.alive and late.exit_code == 1
    assert "hung: step 5 (batch 64)" in late.why and "idle 5.2 s (hang_s 5 s)" in late.why


def test_a_wait_the_guard_ended_is_not_alive() -> None:
    hung = probe.judge(in_step(in_step=False, ended="HUNG", verdict="HUNG", busy_at=95.0), 101.0, None)
    assert not hung.alive and "the guard ended step 5 after VLLM::Worker pid 11 sat idle 5.0 s" in hung.why
    capped = probe.judge(in_step(in_step=False, ended="CAP"), 101.0, None)
    assert not capped.alive and "outlived the guard's 1240 s cap" in capped.why


def test_no_long_step_and_guard_off_are_alive() -> None:
    assert probe.judge(state(), 200.0, None).why == "alive: no step is running long"
    off = probe.judge(None, 200.0, busy=True)
    assert off.alive and "computing" in off.why and "ENGINEDEAD_GUARD=1" in off.why


def test_a_stale_state_is_judged_by_the_probes_own_look() -> None:
    """The engine core stopped rewriting its state: the worker's CPU decides."""
    stale = in_step(verdict="SLOW", busy_at=100.0, updated=100.0)
    assert probe.judge(stale, now=110.0, busy=True).alive
    gone_quiet = probe.judge(stale, now=110.0, busy=False)
    assert not gone_quiet.alive and "idle 10.0 s" in gone_quiet.why


# --- the guard's state file ------------------------------------------------------------


def test_guard_state_round_trips_and_names_its_core(tmp_path: Path) -> None:
    path = guard_state_path(str(tmp_path), 4242)
    assert guard_state_pid(os.path.basename(path)) == 4242
    assert guard_state_pid("enginedead-guard-x.json") is None
    assert read_guard_state(path) is None
    write_guard_state(path, in_step())
    assert read_guard_state(path) == in_step()
    Path(path).write_text("{not json")
    assert read_guard_state(path) is None


def test_state_dir_prefers_the_run_directory() -> None:
    assert state_dir({ENV_DIR: "/run/x", STATE_DIR_ENV: "/s"}) == "/run/x"
    assert state_dir({STATE_DIR_ENV: "/s", "TMPDIR": "/t"}) == "/s"
    assert state_dir({"TMPDIR": "/t"}) == "/t"
    assert state_dir({}) == "/tmp"


def test_stale_states_are_removed_and_a_fronts_own(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mine = guard_state_path(str(tmp_path), os.getpid())
    dead = guard_state_path(str(tmp_path), gone.pid)
    write_guard_state(mine, state(pid=os.getpid(), front=1))
    write_guard_state(dead, state(pid=gone.pid))
    (tmp_path / "other.json").write_text("{}")
    guard.remove_stale_states(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([os.path.basename(mine), "other.json"])
    guard.remove_stale_states(str(tmp_path), front=2)  # not that front's
    assert os.path.exists(mine)
    guard.remove_stale_states(str(tmp_path), front=1)
    assert not os.path.exists(mine)


def test_the_guard_core_writes_its_state_and_keeps_an_ended_wait(tmp_path: Path) -> None:
    cfg = GuardConfig(policy=object(), policy_name="reference", hang_s=3.0)  # type: ignore[arg-type]
    path = str(tmp_path / "state.json")
    core = guard.Core(None, cfg, path, front=77)
    core.write_state(None)
    first = read_guard_state(path)
    assert first is not None and first.front == 77 and first.hang_s == 3.0 and not first.in_step
    core.write_state(dict(in_step=False, step=3, ended="HUNG", busy_at=1.0, updated=5.0, worker=8))
    core.write_state(None)  # the step's end after the guard ended its wait: the ending stays
    last = read_guard_state(path)
    assert last is not None and last.ended == "HUNG" and last.step == 3


# --- the serving side's exit status ----------------------------------------------------


def test_exit_status_tells_a_hang_from_other_deaths(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert exiting.death_exit(d, 9) == (EXIT_DEAD, "the engine died (EngineDeadError)")
    write_guard_state(guard_state_path(d, 10), in_step(in_step=False, ended="CAP"))
    code, why = exiting.death_exit(d, 9)
    assert code == EXIT_DEAD and "outlived the guard's 1240 s cap" in why
    write_guard_state(guard_state_path(d, 12), in_step(
        pid=12, in_step=False, ended="HUNG", busy_at=90.0, updated=93.5))
    code, why = exiting.death_exit(d, 9)
    assert code == EXIT_HUNG and "idle 3.5 s inside step 5 (hang_s 5 s)" in why
    assert exiting.death_exit(d, 8)[0] == EXIT_DEAD  # another server's states
    assert EXIT_HUNG != EXIT_DEAD and 0 not in (EXIT_HUNG, EXIT_DEAD)


def test_exit_opt_in_values() -> None:
    assert exiting.asked({EXIT_ENV: "1"}) and exiting.asked({EXIT_ENV: "on"})
    assert not exiting.asked({}) and not exiting.asked({EXIT_ENV: "0"})


class FakeClient:
    errored = True
    calls = 0

    def shutdown(self, timeout: float | None = None) -> None:
        type(self).calls += 1


def test_the_wrapped_shutdown_exits_with_the_status_after_vllms_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exiting, "_exited", False)
    wrapped = exiting._wrap_shutdown(FakeClient.shutdown, str(tmp_path))
    client = FakeClient()
    with pytest.raises(SystemExit) as info:
        wrapped(client)
    assert info.value.code == EXIT_DEAD and FakeClient.calls == 1
    wrapped(client)  # once only
    healthy = FakeClient()
    healthy.errored = False  # a SIGTERM's shutdown: no death when it began
    monkeypatch.setattr(exiting, "_exited", False)
    wrapped(healthy)
    healthy.errored = True  # the engine's death during that shutdown is not a death
    wrapped(healthy)


# --- probe on real process trees -------------------------------------------------------

TREE = textwrap.dedent("""
    import os, socket, subprocess, sys, time
    port = int(sys.argv[1])
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen()
    worker = "while True: pass" if sys.argv[2] == "busy" else "import time; time.sleep(120)"
    core = subprocess.Popen(["bash", "-c", 'exec -a VLLM::EngineCore ' + sys.executable + ' -c "'
        'import subprocess, sys, time; subprocess.Popen([\\'bash\\', \\'-c\\', \\'exec -a VLLM::Worker '
        + sys.executable + ' -c \\\\\\'' + worker + '\\\\\\'\\']); time.sleep(120)"'])
    print(core.pid, flush=True)
    time.sleep(120)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server_tree(tmp_path: Path) -> Iterator[tuple[psutil.Process, int, Path]]:
    """(the front process, its port, its state directory); the worker is busy."""
    port = _free_port()
    env = {**os.environ, STATE_DIR_ENV: str(tmp_path)}
    env.pop(ENV_DIR, None)
    proc = subprocess.Popen([sys.executable, "-c", TREE, str(port), "busy"], env=env, stdout=subprocess.PIPE,
                            start_new_session=True)
    front = psutil.Process(proc.pid)
    try:
        deadline = time.monotonic() + 20
        while not (probe.engine_cores(front) and probe.workers(probe.engine_cores(front)[0])):
            assert time.monotonic() < deadline, "the fake server tree did not come up"
            time.sleep(0.05)
        yield front, port, tmp_path
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_probe_finds_its_server_by_port_and_reads_its_guard(
    server_tree: tuple[psutil.Process, int, Path]
) -> None:
    front, port, directory = server_tree
    assert probe.listening_pid(port) == front.pid
    off = probe.probe(port=port)
    assert off.alive and "the worker is computing; the guard is off" in off.why
    (core,) = probe.engine_cores(front)
    path = guard_state_path(str(directory), core.pid)
    now = time.monotonic()
    write_guard_state(path, in_step(pid=core.pid, front=front.pid, sent=now - 9, busy_at=now,
                                           updated=now))
    assert probe.probe(pid=front.pid).why.startswith("alive, computing: step 5")
    write_guard_state(path, in_step(pid=core.pid, front=front.pid, in_step=False, ended="HUNG",
                                           busy_at=now - 5, updated=now))
    hung = probe.probe(port=port)
    assert not hung.alive and hung.why.startswith("hung: the guard ended step 5")


def test_probe_says_dead_when_the_worker_or_the_server_is_gone(
    server_tree: tuple[psutil.Process, int, Path]
) -> None:
    front, port, _ = server_tree
    (core,) = probe.engine_cores(front)
    (worker,) = probe.workers(core)
    worker.kill()  # its parent does not reap it: a zombie, as a worker killed under vLLM
    deadline = time.monotonic() + 5
    while probe._alive(worker):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    answer = probe.probe(port=port)
    assert not answer.alive and "VLLM::Worker of engine core" in answer.why
    nobody = _free_port()
    assert probe.probe(port=nobody) == probe.Answer(False, f"dead: nothing listens on port {nobody}")


def test_probe_command_lines_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    nobody = _free_port()
    assert command.main(["probe", "--port", str(nobody)]) == 1
    assert capsys.readouterr().out == f"enginedead probe: dead: nothing listens on port {nobody}\n"
    for bad in (["--port", "0"], ["--port", "x"], ["--pid", "-3"], ["--port", "1", "--pid", "2"]):
        with pytest.raises(SystemExit) as info:
            command.main(["probe", *bad])
        assert info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("enginedead probe: error:"), err


# --- enginedead probes: the replay of probe settings over samples ------------------------

from pytest_enginedead.harness import probing  # noqa: E402


def samples(
    fail_from: float, until: float, latency: float = 0.01, slow: float | None = None
) -> list[probes.Sample]:
    """A probe sampled every 0.5 s over 0..until: fine before ``fail_from``, failing after
    (or, with ``slow``, answering 200 after ``slow`` seconds)."""
    out = []
    t = 0.0
    while t <= until:
        if t < fail_from:
            out.append(probes.Sample(t, latency, True))
        elif slow is not None:
            out.append(probes.Sample(t, slow, True))
        else:
            out.append(probes.Sample(t, None, False))
        t += probes.SAMPLE_S
    return out


K8S = probes.Setting("k8s", 10, 1, 3, "defaults")


def test_replay_kills_after_threshold_failures_in_a_row() -> None:
    # probes at 0, 10, 20, 30...: failing from 5 s on, the third failure in a row is at 30 s
    assert probes.replay(samples(5, 60), K8S, 0.0, 60) == 31.0  # + its 1 s timeout
    assert probes.replay(samples(100, 60), K8S, 0.0, 60) is None
    assert probes.replay(samples(5, 60), K8S, 0.0, 25) is None  # the window ends first


def test_replay_counts_a_slow_answer_as_a_failure_only_past_the_timeout() -> None:
    queued = samples(0, 60, slow=3.2)  # a completion queued behind a 3.2 s step
    assert probes.replay(queued, K8S, 0.0, 60) == 21.0
    patient = probes.Setting("patient", 10, 15, 10, "benchmark")
    assert probes.replay(queued, patient, 0.0, 60) is None


def test_replay_resets_on_a_success_and_skips_gaps() -> None:
    flaky = [s if not (9.5 <= s.t <= 10.5) else probes.Sample(s.t, 0.01, True) for s in samples(5, 60)]
    assert probes.replay(flaky, K8S, 0.0, 60) == 41.0  # the success at 10 s restarts the count
    gap = [s for s in samples(5, 60) if not 19 <= s.t <= 21]
    # no sample near 20 s: that probe counts neither way, the third failure is at 40 s
    assert probes.replay(gap, K8S, 0.0, 60) == 41.0


def test_cells_say_false_kill_dead_anyway_and_found() -> None:
    run = probes.Run("SLOW", True, 60, samples={"GET /health": samples(5, 60)})
    assert probes.cell(run, "GET /health", K8S) == "FALSE KILL at 31s"
    run.died_after_s = 2.1
    assert probes.cell(run, "GET /health", K8S) == "dead at 2.1s anyway"
    assert probes.cell(run, "1-token completion", K8S) == "no kill in 60s"
    hung = probes.Run("HUNG", True, 60, samples={"GET /health": samples(5, 60)})
    assert probes.cell(hung, "GET /health", K8S) == "found at 31s"
    assert probes.cell(hung, "GET /v1/models", K8S) == "not found in 60s"
    text = probes.table([run, hung])
    assert text.splitlines()[0].split()[:2] == ["probe", "setting"]
    assert "SLOW, guard on" in text and "HUNG, guard on" in text and "died at 2.1s" in text
    data = probes.to_json([run, hung])
    assert data["runs"][1]["probes"]["GET /health"]["kill_after_s"]["kubernetes defaults"] == 31.0
    assert data["runs"][0]["probes"]["GET /health"]["first_failure_s"] == 5.0


@pytest.mark.parametrize(("argv", "says"), [
    (["--window", "0"], "argument --window: '0' must be above 0"),
    (["--hang-s", "soon"], "argument --hang-s: 'soon' is not a number of seconds"),
    (["--setting", "mine=5/2"], "argument --setting: 'mine=5/2' is not NAME=PERIOD/TIMEOUT/THRESHOLD"),
    (["--setting", "mine=5/60/3"], "argument --setting: 'mine=5/60/3': needs 0 < PERIOD <= 3600"),
    (["--setting", "mine=a/1/3"], "argument --setting: 'mine=a/1/3': PERIOD and TIMEOUT are seconds"),
    (["--model", "/no/such/model"], "argument --model: model directory '/no/such/model' does not exist"),
])
def test_probes_bad_input_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before any server starts: a start would need vLLM, which this must not reach."""
    monkeypatch.setattr(probing, "measure_all", lambda *a, **k: pytest.fail("a server was started"))
    with pytest.raises(SystemExit) as info:
        command.main(["probes", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("enginedead probes: error: ") and says in err[0], err


def test_probes_refuses_a_model_without_a_tokenizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil


    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(Path(BUNDLED_MODEL) / "config.json", model / "config.json")
    monkeypatch.setattr(probing, "measure_all", lambda *a, **k: pytest.fail("a server was started"))
    assert command.main(["probes", "--model", str(model)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no tokenizer.json: the probes send text" in err[0], err


def test_a_setting_of_ones_own_is_replayed() -> None:
    mine = probes.parse_setting("mine=5/2/3")
    assert mine == probes.Setting("mine", 5.0, 2.0, 3, "--setting")
    run = probes.Run("HUNG", True, 60, samples={"enginedead probe": samples(12, 60)})
    assert probes.cell(run, "enginedead probe", mine) == "found at 27s"  # 15, 20, 25 failed; +2 s timeout
    assert "mine (5s/2s/x3)" in probes.table([run], (*probes.SETTINGS, mine))


@pytest.mark.parametrize(("env", "says"), [
    ({"ENGINEDEAD_PROBE_SETTINGS": "bad"},
     "ENGINEDEAD_PROBE_SETTINGS='bad' (from environment): 'bad' is not"),
    ({"ENGINEDEAD_PROBE_KIND": "ping"}, "ENGINEDEAD_PROBE_KIND='ping' (from environment): one of probe,"),
    ({"ENGINEDEAD_PROBE_WINDOW": "0"}, "ENGINEDEAD_PROBE_WINDOW='0' (from environment): not a number"),
])
def test_the_conformance_suite_refuses_bad_settings_with_exit_4(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], says: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = pytester.runpytest_subprocess("-p", "enginedead", "--pyargs", "pytest_enginedead.conformance")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [ln for ln in result.stderr.lines + result.stdout.lines if ln.startswith("ERROR")]
    assert len(errors) == 1 and says in errors[0], result.stdout.lines + result.stderr.lines
