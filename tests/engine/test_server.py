"""vLLM's OpenAI-compatible API server, real clients, real engine deaths."""

from __future__ import annotations

import re

import psutil
import pytest

from pytest_enginedead.contract.names import EXIT_DEAD, EXIT_ENV
from tests.support import examples
from tests.support.downstream import Downstream, assert_nothing_left, engine_processes

pytestmark = pytest.mark.engine

# 64 requests, most of them failed with HTTP 500; on a loaded machine the first few
# requests can finish before the batch builds up, and the line then counts them.
CLIENTS_LINE = re.compile(
    r"clients:    64 requests: (?:(\d+) completed, )?(\d+) failed \((\d+) with HTTP 500 InternalServerError"
)


def assert_clients_saw_http_500(out: str) -> None:
    """The false death's message says what the 64 clients saw: mostly HTTP 500s."""
    match = CLIENTS_LINE.search(out)
    assert match, out[-5000:]
    completed, failed, with_500 = int(match[1] or 0), int(match[2]), int(match[3])
    assert completed + failed == 64 and with_500 >= 32, match[0]


@pytest.mark.smoke
def test_server_false_death(
    downstream: Downstream, bystander: psutil.Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The short server case every vLLM release runs: 64 concurrent requests under the
    stock 2 s deadline and a busy 0.05 s/seq step end in a false death, with the clients'
    side in the evidence, and the server's whole process tree is gone afterwards.  Run as an
    operator runs a server, with ENGINEDEAD_EXIT_ON_DEATH=1: the unguarded false death exits
    with EXIT_DEAD (70), not vLLM's 0, and the evidence says so."""
    monkeypatch.setenv(EXIT_ENV, "1")
    result = downstream.copy(examples.SERVER_FALSE_DEATH).run("-rA", plugins=["timeout"], in_subprocess=True,
                                                              report=True)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert_clients_saw_http_500(out)
    assert f"server exited (status {EXIT_DEAD})" in out, out[-5000:]
    data = result.report
    assert data is not None
    (test,) = [t for t in data["tests"] if t["when"] == "call"]
    assert test["verdict"] == "SLOW"
    assert data["engines_started"] == 1 and data["engines"][0]["kind"] == "server"
    assert_nothing_left(*engine_processes(data), bystander)


def test_server_false_death_seen_by_clients(downstream: Downstream, bystander: psutil.Process) -> None:
    """Stock 2 s deadline, busy 0.05 s/seq: 2 requests complete; 64 streaming requests of the
    user's own clients in 64 threads end in a false death whose message carries the worker
    evidence, heard late; the reference policy survives 64; the guard lets 64 clients finish;
    a crash is genuine.  (64 plain requests and what those clients saw are
    test_server_false_death's: the same death here would cost one more server start; the
    factory's explicit arguments are test_supervisors.py's operators suite's.)"""
    result = downstream.copy(examples.SERVER).run("-rA", plugins=["timeout"], in_subprocess=True, report=True)
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(  # in run order: each server's tests together, the death last
        [
            "PASSED test_server_suite.py::test_stock_deadline[[]bs2[]]",
            "PASSED test_server_suite.py::test_reference_policy[[]bs64[]]",
            "PASSED test_server_suite.py::test_text_chat_streaming_and_plain_http[[]bs64[]]",
            "PASSED test_server_suite.py::test_the_guard_lets_64_clients_finish[[]bs64[]]",
            "PASSED test_server_suite.py::test_crash_is_genuine[[]bs64[]]",
        ]
    )
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["FAILED test_server_suite.py::test_stock_deadline_own_clients[[]bs64[]]*"])
    # without ENGINEDEAD_EXIT_ON_DEATH the server exits as vLLM does: status 0 after the death
    assert "server exited (status " in out and "server exited (status 0)" in out
    assert "server exited (status 70)" not in out and "server exited (status 71)" not in out
    assert "false engine death: vLLM raised APIError" in out  # inside the stream
    # the death names where its step was: the injected burn, or the model's own code when the
    # death came after the burn (a streaming batch still forming: 37 of 64 at 0.05 s each is 1.85 s)
    wheres = [ln for ln in out.splitlines() if ln.lstrip().startswith("where:")]
    assert out.count("VLLM::Worker (pid ") >= 1 and len(wheres) >= 1, wheres
    assert all("in burn" in w or "vllm/model_executor/" in w for w in wheres), wheres
    # the own clients' test hears of the death 5 s late: judged as of the deadline
    assert "afterwards: judged as of the deadline, from its own stack then" in out
    data = result.report
    assert data is not None
    assert {e["kind"] for e in data["engines"]} == {"server"}
    verdicts = {t["nodeid"].split("::")[-1]: t["verdict"] for t in data["tests"] if t["when"] == "call"}
    assert verdicts["test_stock_deadline_own_clients[bs64]"] == "SLOW"
    assert verdicts["test_crash_is_genuine[bs64]"] == "DEAD"
    # one server configuration plus the guarded one, each ended by its last test's death
    assert data["configurations"] == 2
    assert data["engines_started"] == data["configurations"] and data["restarts"] == 0, data["engines"]
    assert_nothing_left(*engine_processes(data), bystander)
