"""Bad input, every door: one line naming the value and where it came from, before any engine.

Each table row is one bad input a user can give: a flag, an ini key, an environment
variable (ours or vLLM's), a marker, the policy hook, a fixture argument, a policy
object, a model directory, or the ``enginedead`` command line.  Each is run as a
downstream repo would run it (``pytester``; the command through
``python -m pytest_enginedead.command``) and must end in

* a usage error (pytest: exit 4; the command: exit 2) on one line, or, for what
  belongs to one test, that test failing with its one line;
* a message naming the value and its source;
* no ``Traceback``, no ``INTERNALERROR``, no chained-exception banner;
* and no engine: starting one is a tripwire in every run here.

Then: every output path and checkable input is refused before the first engine starts
(a run with vLLM present, watched by an import tripwire), and nothing named
``enginedead*`` is left in the temporary directory.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_enginedead.compat import in_server, llm_api, registry, versions
from pytest_enginedead.harness.pool import EnginePool
from pytest_enginedead.harness.preflight import factory_engine_args
from pytest_enginedead.logic.arguments import BadMarker
from pytest_enginedead.logic.modelconfig import BUNDLED_MODEL
from tests.support.downstream import Downstream, Outcome, enginedead

PLAIN = "def test_plain():\n    pass\n"
ENGINE = "def test_engine(vllm_engine):\n    raise AssertionError('ran')\n"
SERVER = "def test_server(vllm_server):\n    raise AssertionError('ran')\n"
NOBODY = "~enginedead_no_such_user_x"
LONG = "a" * 300
#: a model directory whose path makes a one-line error long (over 250 characters)
LONG_MODEL = "/".join(["d" * 60] * 4) + "/m"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
#: a model config the bundled model's engine accepts; rows break one key of it
GOOD_CONFIG = json.loads((Path(BUNDLED_MODEL) / "config.json").read_text())

#: what the tests here take vLLM's model registry to know (the real one is asked in tests/engine)
KNOWN = frozenset({"LlamaForCausalLM"})
USAGE, TEST = "usage", "test"
NOISE = ("Traceback", "INTERNALERROR", "During handling of the above exception", "RuntimeWarning")


@dataclass(frozen=True)
class Case:
    """One bad input: what the downstream repo holds, how pytest runs, what must be said."""

    id: str
    needles: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str | bytes] = field(default_factory=dict)
    suite: str = PLAIN
    #: USAGE: the run ends with exit 4 and one ERROR line; TEST: the test fails with the line
    kind: str = USAGE


def config(**changes: object) -> str:
    """The bundled model's config.json with ``changes`` (None removes a key)."""
    data = {**GOOD_CONFIG, **changes}
    return json.dumps({k: v for k, v in data.items() if v is not None})


def model(text: str | bytes, name: str = "m") -> dict[str, str | bytes]:
    return {f"{name}/config.json": text}


def policy_module(name: str, body: str) -> dict[str, str | bytes]:
    return {f"{name}.py": textwrap.dedent(body)}


def returning(name: str, value: str) -> dict[str, str | bytes]:
    """A policy module ``name`` whose ``p.timeout_s`` returns ``value`` (Python source)."""
    return policy_module(name, f"""
        class P:
            name = "{name}"

            def timeout_s(self, backend, max_num_seqs, max_num_batched_tokens=None):
                return {value}

        p = P()
    """)


def hook(body: str) -> dict[str, str | bytes]:
    """A conftest.py whose ``pytest_enginedead_policy`` runs ``body``."""
    return {"conftest.py": "import sys\nfrom pytest_enginedead import TimeoutPolicy\n\n\n"
            "def pytest_enginedead_policy(config):\n" + textwrap.indent(textwrap.dedent(body), "    ")}


def factory_call(call: str) -> str:
    """A test that makes one engine or server through its factory: ``call`` names which."""
    return f"def test_f({call.split('(')[0]}):\n    {call}\n"


def marked(marker: str, fixtures: str = "", body: str = "pass") -> str:
    return f"import pytest\n\n\n@pytest.mark.{marker}\ndef test_marked({fixtures}):\n    {body}\n"


NESTED = "[" * 100_000 + "]" * 100_000
HUGE_INT = '{"architectures": ["LlamaForCausalLM"], "vocab_size": ' + "9" * 5000 + "}"
LATIN1 = '{"architectures": ["LlamaForCausalLM"], "name": "caf\xe9"}'.encode("latin-1")

CASES = [
    # --- flags --------------------------------------------------------------------------
    Case("flag-empty-batch-sizes",
         ("--enginedead-batch-sizes='' (from command line)", "no batch sizes given"),
         args=("--enginedead-batch-sizes=",)),
    Case("flag-threshold-above-64", ("--enginedead-busy-threshold='100' (from command line)",
                                     "must be above 0 and at most 64"),
         args=("--enginedead-busy-threshold=100",)),
    Case("flag-threshold-nan", ("--enginedead-busy-threshold='nan'", "at most 64"),
         args=("--enginedead-busy-threshold=nan",)),
    Case("flag-interval-zero", ("--enginedead-sample-interval='0'", "above 0 and at most 60 seconds"),
         args=("--enginedead-sample-interval=0",)),
    Case("flag-report-under-a-file", ("--enginedead-report=", "(from command line)", "is not a directory"),
         args=("--enginedead-report={repo}/afile/sub/r.json",), files={"afile": "x"}),
    Case("flag-report-unknown-user", (f"'{NOBODY}/r.json' cannot be expanded", "(from command line)"),
         args=(f"--enginedead-report={NOBODY}/r.json",)),
    Case("flag-report-a-directory", ("is a directory; give a file path", "(from command line)"),
         args=("--enginedead-report={repo}",)),
    Case("flag-report-name-too-long", ("too long a file name (at most 255 bytes)", "(from command line)"),
         args=(f"--enginedead-report={LONG}.json",)),
    Case("flag-report-path-too-long", ("cannot be used: File name too long", "(from command line)"),
         args=("--enginedead-report={repo}/" + "/".join([LONG] * 3) + "/r.json",)),
    # --- shards and durations (issue 21.3) ----------------------------------------------------------
    Case("flag-shard-malformed", ("--enginedead-shard='1-2' (from command line)",
                                  "'1-2' is not K/N; use e.g. 1/2"),
         args=("--enginedead-shard=1-2",)),
    Case("flag-shard-out-of-range", ("--enginedead-shard='3/2' (from command line)",
                                     "there is no shard 3 of 2; K runs from 1 to 2"),
         args=("--enginedead-shard=3/2",)),
    Case("flag-shard-zero", ("--enginedead-shard='0/2'", "there is no shard 0 of 2"),
         args=("--enginedead-shard=0/2",)),
    Case("flag-shard-no-shards", ("--enginedead-shard='1/0'", "the number of shards must be from 1 to 1000"),
         args=("--enginedead-shard=1/0",)),
    Case("env-shard-words", ("ENGINEDEAD_SHARD='one/two' (from environment)", "is not K/N"),
         env={"ENGINEDEAD_SHARD": "one/two"}),
    Case("ini-shard-negative", ("enginedead_shard = '-1/2' (from tox.ini)", "is not K/N"),
         files={"tox.ini": "[pytest]\nenginedead_shard = -1/2\n"}),
    Case("flag-durations-missing", ("--enginedead-durations='nope.json' (from command line)",
                                    "'nope.json' does not exist; write it with --enginedead-store-durations"),
         args=("--enginedead-shard=1/2", "--enginedead-durations=nope.json")),
    Case("flag-durations-foreign", ("--enginedead-durations='d.json' (from command line) is not an "
                                    "enginedead durations file (no 'enginedead_durations' key)",),
         args=("--enginedead-shard=1/2", "--enginedead-durations=d.json"),
         files={"d.json": '{"test_x.py::test_plain": 1.0}'}),
    Case("flag-durations-truncated", ("--enginedead-durations='d.json' (from command line) is not a "
                                      "durations file: not JSON",),
         args=("--enginedead-shard=1/2", "--enginedead-durations=d.json"),
         files={"d.json": '{"enginedead_durations": 1, "vllm": "0.3'}),
    Case("flag-durations-other-release", ("--enginedead-durations='d.json' (from command line) was "
                                          "recorded on vLLM '0.1.0', this run has",),
         args=("--enginedead-shard=1/2", "--enginedead-durations=d.json"),
         files={"d.json": '{"enginedead_durations": 1, "vllm": "0.1.0", "tests": {}}'}),
    Case("flag-durations-not-seconds", ("--enginedead-durations='d.json'",
                                        "'t::x' has 'long', not a number of seconds >= 0"),
         args=("--enginedead-durations=d.json",),
         files={"d.json": '{"enginedead_durations": 1, "vllm": "@VLLM@", "tests": {"t::x": "long"}}'}),
    Case("flag-durations-a-directory", ("--enginedead-durations='sub' (from command line): "
                                        "cannot read 'sub'",),
         args=("--enginedead-durations=sub",), files={"sub/x": "x"}),
    Case("flag-store-durations-is-the-report", ("--enginedead-store-durations='r.json' (from command line): "
                                                "names the same file as --enginedead-report='r.json'",),
         args=("--enginedead-report=r.json", "--enginedead-store-durations=r.json")),
    Case("flag-store-durations-under-a-file", ("--enginedead-store-durations=", "is not a directory"),
         args=("--enginedead-store-durations=afile/d.json",), files={"afile": "x"}),
    Case("flag-model-unknown-user", (f"'{NOBODY}/m' cannot be expanded", "--enginedead-model="),
         args=(f"--enginedead-model={NOBODY}/m",)),
    Case("flag-model-name-too-long", ("cannot be used: File name too long", "(from command line)"),
         args=(f"--enginedead-model={LONG}",)),
    Case("flag-model-empty", ("--enginedead-model='' (from command line)", "no model directory given"),
         args=("--enginedead-model=",)),
    Case("flag-model-symlink-loop", ("cannot be used: Too many levels of symbolic links",),
         args=("--enginedead-model={repo}/loop",)),
    Case("flag-policy-empty", ("--enginedead-policy='' (from command line)", "no policy given"),
         args=("--enginedead-policy=",)),
    Case("flag-policy-relative-module", ("--enginedead-policy='.pol:p'", "'.pol' is not a module name"),
         args=("--enginedead-policy=.pol:p",)),
    # --- environment: vLLM's and ours -----------------------------------------------------
    Case("vllm-env-not-an-integer", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='abc' (from environment)",
                                     "is not an integer"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "abc"}),
    Case("vllm-env-with-vllm-stock", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='abc' (from environment)",),
         args=("--enginedead-policy=vllm-stock",), env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "abc"}),
    Case("vllm-env-fraction", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='1.5'", "is not an integer"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1.5"}),
    Case("vllm-env-zero", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='0'", "must be at least 1"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "0"}, suite=ENGINE),
    Case("vllm-env-negative", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='-3'", "must be at least 1"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "-3"}),
    Case("vllm-env-empty", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=''", "is empty"),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": ""}),
    Case("vllm-env-with-hook", ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='x'",),
         env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "x"}, files=hook("return TimeoutPolicy.vllm_stock()")),
    Case("env-empty-batch-sizes", ("ENGINEDEAD_BATCH_SIZES='' (from environment)", "no batch sizes given"),
         env={"ENGINEDEAD_BATCH_SIZES": ""}),
    Case("env-guard-not-a-switch", ("ENGINEDEAD_GUARD='maybe' (from environment)", "is not a switch"),
         env={"ENGINEDEAD_GUARD": "maybe"}),
    Case("env-report-under-a-file", ("ENGINEDEAD_REPORT=", "(from environment)", "is not a directory"),
         env={"ENGINEDEAD_REPORT": "afile/r.json"}, files={"afile": "x"}),
    Case("env-threshold-above-64", ("ENGINEDEAD_BUSY_THRESHOLD='65' (from environment)", "at most 64"),
         env={"ENGINEDEAD_BUSY_THRESHOLD": "65"}),
    Case("env-interval-not-a-number", ("ENGINEDEAD_SAMPLE_INTERVAL='abc' (from environment)",
                                       "is not a number of seconds"),
         env={"ENGINEDEAD_SAMPLE_INTERVAL": "abc"}),
    Case("env-model-nested-json", ("ENGINEDEAD_MODEL=", "nests too deeply for Python's JSON parser"),
         env={"ENGINEDEAD_MODEL": "m"}, files=model(NESTED)),
    Case("env-policy-blank", ("ENGINEDEAD_POLICY='  ' (from environment)", "no policy given"),
         env={"ENGINEDEAD_POLICY": "  "}),
    # --- ini: pytest.ini and pyproject.toml ----------------------------------------------------
    Case("ini-empty-batch-sizes", ("enginedead_batch_sizes = '' (from pytest.ini)", "no batch sizes given"),
         files={"pytest.ini": "[pytest]\nenginedead_batch_sizes =\n"}),
    Case("ini-threshold-above-64", ("enginedead_busy_threshold = '100' (from pytest.ini)", "at most 64"),
         files={"pytest.ini": "[pytest]\nenginedead_busy_threshold = 100\n"}),
    Case("ini-empty-policy", ("enginedead_policy = '' (from pytest.ini)", "no policy given"),
         files={"pytest.ini": "[pytest]\nenginedead_policy =\n"}),
    Case("ini-empty-report", ("enginedead_report = '' (from pytest.ini)", "no path given"),
         files={"pytest.ini": "[pytest]\nenginedead_report =\n"}),
    Case("toml-list-model",
         ("enginedead_model = ['a', 'b'] (from pyproject.toml)", "a list, where one value"),
         files={"pyproject.toml": '[tool.pytest.ini_options]\nenginedead_model = ["a", "b"]\n'}),
    Case("toml-list-bad-size", ("enginedead_batch_sizes = [8, 0] (from pyproject.toml)",
                                "batch size 0 must be at least 1"),
         files={"pyproject.toml": "[tool.pytest.ini_options]\nenginedead_batch_sizes = [8, 0]\n"}),
    Case("toml-native-list", ("enginedead_batch_sizes (from pyproject.toml)", "expects a string",
                              'write it as a string, e.g. enginedead_batch_sizes = "8,64"'),
         files={"pyproject.toml": "[tool.pytest]\nenginedead_batch_sizes = [8, 64]\n"}),
    Case("ini-override-empty-item", ("enginedead_batch_sizes = '8,,64' (from -o/--override-ini)",
                                     "empty item in '8,,64'"),
         args=("-o", "enginedead_batch_sizes=8,,64")),
    Case("toml-number-interval", ("enginedead_sample_interval = '0' (from pyproject.toml)",
                                  "must be above 0 and at most 60 seconds"),
         files={"pyproject.toml": "[tool.pytest.ini_options]\nenginedead_sample_interval = 0\n"}),
    Case("ini-model-unknown-user", (f"enginedead_model = '{NOBODY}' (from pytest.ini)", "cannot be expanded"),
         files={"pytest.ini": f"[pytest]\nenginedead_model = {NOBODY}\n"}),
    # --- markers that cannot mean anything ---------------------------------------------------
    Case("marker-timeout-without-engine", ("@pytest.mark.enginedead_timeout on a test that uses no engine",),
         suite=marked("enginedead_timeout(2)"), kind=TEST),
    Case("marker-inject-without-engine", ("@pytest.mark.enginedead_inject on a test that uses no engine",),
         suite=marked("enginedead_inject(slow_s_per_seq=0.1)"), kind=TEST),
    Case("marker-guard-without-engine", ("@pytest.mark.enginedead_guard on a test that uses no engine",),
         suite=marked("enginedead_guard()"), kind=TEST),
    Case("marker-batch-sizes-without-engine", ("@pytest.mark.enginedead_batch_sizes on a test that uses no "
                                               "engine", "or engine_batch_size"),
         suite=marked("enginedead_batch_sizes(2)"), kind=TEST),
    Case("marker-junk-without-engine", ("@pytest.mark.enginedead_timeout on a test that uses no engine",),
         suite=marked("enginedead_timeout(junk=1)"), kind=TEST),
    Case("marker-in-param-without-engine", ("@pytest.mark.enginedead_inject on a test that uses no engine",),
         suite="import pytest\n\n\n@pytest.mark.parametrize('x', [pytest.param(1, marks="
               "pytest.mark.enginedead_inject(crash_at_step=1))])\ndef test_p(x):\n    pass\n", kind=TEST),
    Case("marker-timeout-on-factory-test", ("@pytest.mark.enginedead_timeout on a test that uses no engine",
                                            "vllm_engine_factory and vllm_server_factory take their own"),
         suite=marked("enginedead_timeout(2)", "vllm_engine_factory"), kind=TEST),
    Case("marker-bad-sizes-on-batch-size-test", ("@pytest.mark.enginedead_batch_sizes(0,): batch size 0",),
         suite=marked("enginedead_batch_sizes(0)", "engine_batch_size"), kind=TEST),
    Case("marker-vacuous-headroom", ("headroom=0 must be above 0", "0 would pass any policy"),
         suite=marked("enginedead_invariants('headroom', headroom=0, step_times={8: 1.0})"), kind=TEST),
    Case("marker-invariants-cap-not-a-number",
         ("@pytest.mark.enginedead_invariants: cap_s='x' is not a number",),
         suite=marked("enginedead_invariants('capped', cap_s='x')"), kind=TEST),
    Case("marker-guard-policy-missing", ("@pytest.mark.enginedead_guard: policy='ednosuch:x'",
                                         "no module named 'ednosuch'"),
         suite=marked("enginedead_guard(policy='ednosuch:x')", "vllm_engine"), kind=TEST),
    Case("marker-guard-hang-zero", ("@pytest.mark.enginedead_guard: hang_s=0 must be above 0",),
         suite=marked("enginedead_guard(hang_s=0)", "vllm_engine"), kind=TEST),
    # --- the pytest_enginedead_policy hook -------------------------------------------------------
    Case("hook-raises", ("pytest_enginedead_policy hook (", "conftest.py:", "raised RuntimeError: boom"),
         files=hook("raise RuntimeError('boom')")),
    Case("hook-calibrated-bad-batch", ("pytest_enginedead_policy hook", "raised ValueError: "
                                       "TimeoutPolicy.calibrated: bad calibration sample: batch 0"),
         files=hook("return TimeoutPolicy.calibrated({0: 1.0})")),
    Case("hook-calibrated-bad-step", ("TimeoutPolicy.calibrated: bad calibration sample: batch 8, step "
                                      "'fast' s is not a finite number >= 0",),
         files=hook("return TimeoutPolicy.calibrated({8: 'fast'})")),
    Case("hook-calibrated-not-samples", ("TimeoutPolicy.calibrated: samples must be a",),
         files=hook("return TimeoutPolicy.calibrated(42)")),
    Case("hook-calibrated-infinite-headroom", ("headroom must be > 0 and finite, got inf",),
         files=hook("return TimeoutPolicy.calibrated({8: 1.0}, headroom=float('inf'))")),
    Case("hook-exits", ("pytest_enginedead_policy hook (", "raised SystemExit: 3"),
         files=hook("sys.exit(3)")),
    Case("hook-attribute-raises", ("returned a Sly; reading its timeout_s raised RuntimeError: no",),
         files=hook("""
             class Sly:
                 @property
                 def timeout_s(self):
                     raise RuntimeError("no")
             return Sly()
         """)),
    Case("hook-returns-a-number", ("pytest_enginedead_policy returned int, which has no callable timeout_s",),
         files=hook("return 42")),
    # --- policy objects: what they return, how they load -----------------------------------------
    Case("policy-nan-engine", ("policy pol_nan: timeout_s(CPU, 8) returned nan", "finite number of seconds"),
         args=("--enginedead-policy=pol_nan:p",), files=returning("pol_nan", "float('nan')"), suite=ENGINE,
         kind=TEST),
    Case("policy-inf-engine", ("policy pol_inf: timeout_s(CPU, 8) returned inf",),
         args=("--enginedead-policy=pol_inf:p",), files=returning("pol_inf", "float('inf')"), suite=ENGINE,
         kind=TEST),
    Case("policy-zero-engine", ("policy pol_zero: timeout_s(CPU, 8) returned 0", ">= 1"),
         args=("--enginedead-policy=pol_zero:p",), files=returning("pol_zero", "0"), suite=ENGINE, kind=TEST),
    Case("policy-negative-engine", ("policy pol_neg: timeout_s(CPU, 8) returned -5",),
         args=("--enginedead-policy=pol_neg:p",), files=returning("pol_neg", "-5"), suite=ENGINE, kind=TEST),
    Case("policy-text-engine", ("policy pol_txt: timeout_s(CPU, 8) returned 'soon', not a number",),
         args=("--enginedead-policy=pol_txt:p",), files=returning("pol_txt", "'soon'"), suite=ENGINE,
         kind=TEST),
    Case("policy-bool-engine", ("policy pol_bool: timeout_s(CPU, 8) returned True, not a number of seconds "
                                "(bool; give an int or a float)",),
         args=("--enginedead-policy=pol_bool:p",), files=returning("pol_bool", "True"), suite=ENGINE,
         kind=TEST),
    Case("policy-none-server", ("policy pol_none: timeout_s(CPU, 8) returned None, not a number",),
         args=("--enginedead-policy=pol_none:p",), files=returning("pol_none", "None"), suite=SERVER,
         kind=TEST),
    Case("policy-raises-engine", ("policy pol_div: timeout_s(CPU, 8) raised ZeroDivisionError",),
         args=("--enginedead-policy=pol_div:p",), files=returning("pol_div", "1 / 0"), suite=ENGINE,
         kind=TEST),
    Case("policy-nan-invariants", ("policy pol_nan2 breaks", "timeout_s(CPU, 1) returned nan"),
         args=("--enginedead-policy=pol_nan2:p",), files=returning("pol_nan2", "float('nan')"),
         suite=marked("enginedead_invariants('cpu_gt_gpu')"), kind=TEST),
    Case("policy-text-invariants", ("capped: timeout_s(CPU, 1048576) returned 'x', not a number of seconds",),
         args=("--enginedead-policy=pol_txt2:p",), files=returning("pol_txt2", "'x'"),
         suite=marked("enginedead_invariants('capped')"), kind=TEST),
    Case("policy-nan-factory", ("vllm_engine_factory: policy pol_nan3: timeout_s(CPU, 4) returned nan",),
         args=("--enginedead-policy=pol_nan3:p",), files=returning("pol_nan3", "float('nan')"),
         suite="def test_f(vllm_engine_factory):\n    vllm_engine_factory(4)\n", kind=TEST),
    Case("policy-module-exits", ("--enginedead-policy='pol_exit:p' (from command line)",
                                 "importing 'pol_exit' failed: SystemExit: 2"),
         args=("--enginedead-policy=pol_exit:p",), files=policy_module("pol_exit", "raise SystemExit(2)\n")),
    Case("policy-module-getattr-raises", ("pol_ga:p: reading 'p' raised KeyError",),
         args=("--enginedead-policy=pol_ga:p",),
         files=policy_module("pol_ga", "def __getattr__(name):\n    raise KeyError(name)\n")),
    Case("policy-timeout-s-property-raises", ("pol_prop:p: reading timeout_s raised RuntimeError: nope",),
         args=("--enginedead-policy=pol_prop:p",), files=policy_module("pol_prop", """
             class P:
                 @property
                 def timeout_s(self):
                     raise RuntimeError("nope")
             p = P()
         """)),
    Case("policy-fixed-infinite", ("importing 'pol_fix' failed: ValueError: TimeoutPolicy.fixed",),
         args=("--enginedead-policy=pol_fix:p",),
         files=policy_module("pol_fix", "from pytest_enginedead import TimeoutPolicy\n"
                                        "p = TimeoutPolicy.fixed(float('inf'))\n")),
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
    # --- model directories an engine cannot run -----------------------------------------------------
    Case("model-negative-vocab", ('"vocab_size": -1 must be at least 1', "--enginedead-model='",
                                  "(from command line)"),
         args=("--enginedead-model=m",), files=model(config(vocab_size=-1)), suite=ENGINE),
    Case("model-fractional-vocab", ('"vocab_size": 32000.5 is not a whole number',),
         args=("--enginedead-model=m",), files=model(config(vocab_size=32000.5)), suite=ENGINE),
    Case("model-bool-hidden", ('"hidden_size": True is not a whole number',),
         args=("--enginedead-model=m",), files=model(config(hidden_size=True)), suite=ENGINE),
    Case("model-text-layers", ('"num_hidden_layers": \'2\' is not a whole number',),
         args=("--enginedead-model=m",), files=model(config(num_hidden_layers="2")), suite=ENGINE),
    Case("model-zero-heads", ('"num_attention_heads": 0 must be at least 1',),
         args=("--enginedead-model=m",), files=model(config(num_attention_heads=0)), suite=SERVER),
    Case("model-hidden-not-divisible", ('"hidden_size" 250 does not split into "num_attention_heads" 4',),
         args=("--enginedead-model=m",), files=model(config(hidden_size=250, head_dim=None)), suite=ENGINE),
    Case("model-kv-heads-not-dividing",
         ('"num_attention_heads" 4 is not a multiple of "num_key_value_heads" 3',),
         args=("--enginedead-model=m",), files=model(config(num_key_value_heads=3)), suite=ENGINE),
    Case("model-infinite-vocab", ('"vocab_size": inf is not a whole number',),
         args=("--enginedead-model=m",),
         files=model(config(vocab_size=1).replace('"vocab_size": 1', '"vocab_size": 1e999')),
         suite=ENGINE),
    Case("model-huge-vocab", ('"vocab_size": 10000000000000000000000000000000000000000 is too large',),
         args=("--enginedead-model=m",), files=model(config(vocab_size=10**40)), suite=ENGINE),
    Case("model-nested-text-config", ('"text_config.vocab_size": 0 must be at least 1',),
         args=("--enginedead-model=m",), files=model(config(text_config={"vocab_size": 0})), suite=ENGINE),
    Case("model-json-nests-too-deep", ("--enginedead-model='m' (from command line)", "nests too deeply"),
         args=("--enginedead-model=m",), files=model(NESTED)),
    Case("model-json-huge-number", ("is not valid JSON: Exceeds the limit (4300 digits)",),
         args=("--enginedead-model=m",), files=model(HUGE_INT)),
    Case("model-json-not-utf8", ("config.json is not UTF-8 text (invalid continuation byte",),
         args=("--enginedead-model=m",), files=model(LATIN1)),
    Case("model-config-is-a-directory", ("has no config.json",),
         args=("--enginedead-model=m",), files={"m/config.json/x": "{}"}),
    Case("model-unknown-architecture", ("--enginedead-model='", "(from command line)",
                                        "names architecture NoSuchModelForCausalLM, which vLLM"),
         args=("--enginedead-model=m",), files=model(config(architectures=["NoSuchModelForCausalLM"])),
         suite=SERVER),
    Case("model-unknown-architecture-factory-suite", ("ENGINEDEAD_MODEL='", "(from environment)",
                                                      "names architecture NoSuchModelForCausalLM"),
         env={"ENGINEDEAD_MODEL": "m"}, files=model(config(architectures=["NoSuchModelForCausalLM"])),
         suite=factory_call("vllm_server_factory(2)")),
]


@pytest.fixture
def tripwire(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """In-process runs: the engine paths are reachable (vLLM counts as present), but an
    engine start is recorded and refused; the list of attempts must stay empty."""
    started: list[str] = []

    def refuse(self: EnginePool, spec: object, *args: object, **kwargs: object) -> None:
        started.append(repr(spec))
        raise AssertionError("ENGINE STARTED: bad input must be refused before any engine starts")

    monkeypatch.setattr(EnginePool, "start_dedicated", refuse)
    monkeypatch.setattr(versions, "vllm_missing_reason", lambda: None)
    # vLLM's registry, asked of every model before an engine starts: not imported here
    monkeypatch.setattr(registry, "known_architectures", lambda: KNOWN)
    monkeypatch.delenv(versions.DEADLINE_ENV, raising=False)
    yield started
    assert started == [], "an engine start was attempted"


def prepare(repo: Path, case: Case, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Write the case's files into the repo, set its environment; return its arguments."""
    (repo / "test_case.py").write_text(case.suite)
    for name, content in case.files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:  # @VLLM@: the installed release, as a durations file records it
            path.write_text(content.replace("@VLLM@", versions.installed_version() or "none"))
    if any("{repo}/loop" in a for a in case.args):
        (repo / "loop").symlink_to(repo / "loop")
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    return [a.replace("{repo}", str(repo)) for a in case.args]


def make_nodes(repo: Path, nodes: dict[str, str]) -> dict[Path, tuple[int, int]]:
    """Make each special file (``chr``: a character device like /dev/null, ``fifo``, ``link:TARGET``);
    return their (file type, inode), for ``assert_untouched``."""
    made = {}
    for name, kind in nodes.items():
        path = repo / name
        if kind == "chr":
            if os.geteuid() != 0:
                pytest.skip("making a character device needs root")
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to(kind.removeprefix("link:"))
        st = os.lstat(path)
        made[path] = (stat.S_IFMT(st.st_mode), st.st_ino)
    return made


def assert_untouched(nodes: dict[Path, tuple[int, int]]) -> None:
    """Each special file is still what it was: the same type, the same inode (never renamed over)."""
    __tracebackhide__ = True
    for path, (kind, inode) in nodes.items():
        st = os.lstat(path)
        assert (stat.S_IFMT(st.st_mode), st.st_ino) == (kind, inode), f"{path} was replaced"


def assert_clean(text: str) -> None:
    __tracebackhide__ = True
    for noise in NOISE:
        assert noise not in text, f"{noise!r} in the output:\n{text[-3000:]}"


def usage_line(result: Outcome) -> str:
    """Exit 4 and exactly one non-blank line on stderr, the enginedead one; returned."""
    __tracebackhide__ = True
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.text[-3000:]
    lines = [ln for ln in result.stderr.str().splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("ERROR: enginedead: "), lines
    return lines[0]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line(
    downstream: Downstream, tripwire: list[str], monkeypatch: pytest.MonkeyPatch, case: Case
) -> None:
    args = prepare(downstream.path, case, monkeypatch)
    result = downstream.run(*args, "-rfE")
    assert_clean(result.text)
    if case.kind == USAGE:
        line = usage_line(result)
    else:
        assert result.ret == pytest.ExitCode.TESTS_FAILED, result.text[-3000:]
        outcomes = result.outcomes
        assert outcomes.get("failed", 0) + outcomes.get("errors", 0) >= 1, outcomes
        assert outcomes.get("passed", 0) == 0, outcomes
        line = result.stdout.str()
        # the failure's own section holds the message itself, not a traceback around it
        section = [ln for ln in result.stdout.lines
                   if case.needles[0] in ln and not ln.startswith(("FAILED ", "ERROR ", "E "))]
        assert section, line[-3000:]
    for needle in case.needles:
        assert needle in line, (needle, line[-3000:])
    if case.id == "vllm-env-with-vllm-stock":
        assert "vllm-stock" not in line  # the variable is to blame, not the valid policy name


def test_the_table_is_large_enough() -> None:
    """At least 60 bad inputs across every door (with the command's, below)."""
    doors = {c.id.split("-")[0] for c in CASES}
    assert {"flag", "env", "vllm", "ini", "toml", "marker", "hook", "policy", "factory", "model"} <= doors
    assert len(CASES) + len(COMMAND_CASES) >= 60


# --- the handles' own arguments -------------------------------------------------------------

#: (id, method, arguments, what the line must say[, the engine's arguments]): each refused before
#: the engine sees it
HANDLE_CASES = [
    ("generate-arriving-negative", "generate", {"arriving": -1},
     ("EngineHandle.generate: arriving=-1 is not a whole number >= 1", "None: all at once")),
    ("generate-arriving-zero", "generate", {"arriving": 0}, ("arriving=0 is not a whole number >= 1",)),
    ("generate-prompt-len-zero", "generate", {"prompt_len": 0}, ("EngineHandle.generate: prompt_len=0",)),
    ("generate-n-zero", "generate", {"n": 0}, ("EngineHandle.generate: n=0 is not a whole number >= 1",)),
    ("generate-n-fraction", "generate", {"n": 2.5}, ("n=2.5 is not a whole number",)),
    ("generate-max-tokens-bool", "generate", {"max_tokens": True}, ("max_tokens=True is not a whole",)),
    ("generate-max-tokens-text", "generate", {"max_tokens": "8"}, ("max_tokens='8' is not a whole",)),
    ("generate-past-max-model-len", "generate", {"prompt_len": 500, "max_tokens": 20},
     ("prompt_len=500 + max_tokens=20 is 520 tokens, more than the engine's max_model_len 512",
      "max_model_len=N")),
    ("complete-n-negative", "complete", {"n": -4}, ("ServerHandle.complete: n=-4 is not a whole number",)),
    ("complete-prompt-len-zero", "complete", {"prompt_len": 0}, ("ServerHandle.complete: prompt_len=0",)),
    ("complete-max-tokens-none", "complete", {"max_tokens": None}, ("max_tokens=None is not a whole",)),
    ("complete-stream-text", "complete", {"stream": "yes"}, ("stream='yes' is not True or False",)),
    ("complete-past-max-model-len", "complete", {"prompt_len": 508, "max_tokens": 4},
     ("prompt_len=508 + max_tokens=4 + 1 (the tokenizer's BOS token) is 513 tokens",)),
    ("complete-past-a-factory-max-model-len", "complete", {"prompt_len": 60, "max_tokens": 8},
     ("is 69 tokens, more than the engine's max_model_len 64",), (("max_model_len", 64),)),
]


@pytest.mark.parametrize(("method", "kwargs", "needles", "extra"), [(*c[1:4], c[4] if len(c) > 4 else ())
                                                                   for c in HANDLE_CASES],
                         ids=[c[0] for c in HANDLE_CASES])
def test_a_handles_bad_argument_is_one_line_and_the_engine_stays(
    method: str, kwargs: dict[str, object], needles: tuple[str, ...], extra: tuple[tuple[str, object], ...]
) -> None:
    """``generate`` / ``complete`` check every argument before the engine (or server) sees it:
    the test fails in one line naming the value (``pytest.fail``, no traceback), and the engine
    is not marked broken, so a shared one stays in service (on a real engine:
    tests/engine/test_guard.py).  The engines here were never started: reaching them fails."""
    from pytest_enginedead.face.handles import EngineHandle, ServerHandle
    from pytest_enginedead.harness.offline import Engine
    from pytest_enginedead.harness.server import Server
    from pytest_enginedead.logic.planning import EngineSpec, Instructions

    server = method == "complete"
    engine = (Server if server else Engine)(EngineSpec(BUNDLED_MODEL, 8, extra, server=server))
    handle = (ServerHandle if server else EngineHandle)(engine, 8, Instructions(300.0))
    try:
        with pytest.raises(pytest.fail.Exception) as info:
            getattr(handle, method)(**kwargs)
    finally:
        engine.stop()
    message = str(info.value)
    assert not info.value.pytrace and "\n" not in message, message
    for needle in needles:
        assert needle in message, (needle, message)
    assert not engine.broken


def test_a_factorys_engine_arguments_are_held_against_vllms_own_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Names vLLM does not take fail in one line naming each, with the near misses (the lists
    stand in for the installed vLLM's; the real ones are read in tests/engine/test_compat_vllm.py);
    a vLLM that cannot say lets the names through to its own start."""

    monkeypatch.setattr(llm_api, "engine_argument_names",
                        lambda: frozenset({"max_model_len", "enforce_eager"}))
    monkeypatch.setattr(in_server, "server_option_strings",
                        lambda: frozenset({"--max-model-len", "--enforce-eager", "--no-enforce-eager"}))
    factory_engine_args("f", {"max_model_len": 256, "enforce_eager": False}, server=False)
    factory_engine_args("f", {"max_model_len": 256, "enforce_eager": False, "x": None}, server=True)
    with pytest.raises(BadMarker) as info:
        factory_engine_args("vllm_engine_factory", {"no_such_flag": 1, "max_modl_len": 3},
                                    server=False)
    assert str(info.value).startswith("vllm_engine_factory: no_such_flag=1, max_modl_len=3 are not engine "
                                      "arguments of vLLM"), info.value
    assert "did you mean max_model_len?" in str(info.value)
    with pytest.raises(BadMarker, match="no_such_flag=1 becomes --no-such-flag, which the API"):
        factory_engine_args("vllm_server_factory", {"no_such_flag": 1}, server=True)
    with pytest.raises(BadMarker, match="disable_log_stats=False becomes --no-disable-log-stats"):
        factory_engine_args("vllm_server_factory", {"disable_log_stats": False}, server=True)
    monkeypatch.setattr(llm_api, "engine_argument_names", lambda: None)
    monkeypatch.setattr(in_server, "server_option_strings", lambda: None)
    factory_engine_args("f", {"no_such_flag": 1}, server=False)
    factory_engine_args("f", {"no_such_flag": 1}, server=True)


# --- the enginedead command ----------------------------------------------------------------

#: an import tripwire for subprocesses: vLLM's engine entry points, imported before any engine
#: starts (``from vllm import LLM``, the API server, the engine core), are recorded and refused
TRIPWIRE = """
import importlib.abc, os, sys

ENTRY = ("vllm.entrypoints.llm", "vllm.entrypoints.openai.api_server", "vllm.v1.engine.core",
         "vllm.v1.engine.llm_engine", "vllm.v1.engine.core_client")


class Tripwire(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ENTRY:
            with open(os.environ["ENGINEDEAD_TEST_TRIPWIRE"], "a") as f:
                f.write(f"{os.getpid()} {name}\\n")
            raise ImportError(f"tripwire: {name}: an engine was about to start")
        return None


sys.meta_path.insert(0, Tripwire())
"""


@pytest.fixture
def wired(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Subprocesses started from this test carry the import tripwire; yields its record file."""
    site = tmp_path / "tripwire-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(TRIPWIRE)
    record = tmp_path / "tripwire.log"
    path = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    monkeypatch.setenv("ENGINEDEAD_TEST_TRIPWIRE", str(record))
    for name in list(os.environ):
        if name.startswith("ENGINEDEAD_") and name != "ENGINEDEAD_TEST_TRIPWIRE":
            monkeypatch.delenv(name)
    monkeypatch.delenv(versions.DEADLINE_ENV, raising=False)
    yield record
    assert not record.exists(), f"an engine was about to start: {record.read_text()}"


@dataclass(frozen=True)
class Command:
    """One bad ``enginedead`` command line: its arguments, environment, files; what it must say."""

    id: str
    args: tuple[str, ...]
    needles: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str | bytes] = field(default_factory=dict)
    #: special files the case makes first (see ``make_nodes``); each must be untouched after
    nodes: dict[str, str] = field(default_factory=dict)


COMMAND_CASES = [
    Command("vllm-env-calibrate", ("calibrate", "--batch-sizes", "1"),
            ("enginedead calibrate: error: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='abc' (from environment) "
             "is not an integer",),
            env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "abc"}),
    Command("vllm-env-check-vllm-stock", ("check", "--policy", "vllm-stock"),
            ("enginedead check: error: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='1.5' (from environment)",),
            env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1.5"}),
    Command("vllm-env-zero", ("check",), ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='0'", "must be at least 1"),
            env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "0"}),
    Command("env-threshold", ("check",), ("ENGINEDEAD_BUSY_THRESHOLD='100' (from environment)", "at most 64"),
            env={"ENGINEDEAD_BUSY_THRESHOLD": "100"}),
    Command("report-under-a-file", ("check", "--report", "afile/r.json"),
            ("enginedead check: error: --report 'afile/r.json': cannot be created: ", "is not a directory"),
            files={"afile": "x"}),
    Command("report-unknown-user", ("check", "--report", f"{NOBODY}/r.json"),
            (f"--report '{NOBODY}/r.json': ", "cannot be expanded"),),
    Command("report-name-too-long", ("check", "--report", LONG),
            ("--report 'aaa", "too long a file name")),
    Command("log-a-directory", ("calibrate", "--log", "."), ("--log '.': ", "is a directory")),
    Command("plot-under-a-file", ("calibrate", "--plot", "afile/p.png"),
            ("--plot 'afile/p.png': ", "is not a directory"), files={"afile": "x"}),
    Command("plot-unknown-format", ("calibrate", "--plot", "steps.xyz"),
            ("enginedead calibrate: error: --plot 'steps.xyz': matplotlib picks the format",)),
    Command("model-bad-vocab", ("check", "--model", "m"),
            ("enginedead check: error: --model", '"vocab_size": 0 must be at least 1'),
            files=model(config(vocab_size=0))),
    Command("model-hidden-not-divisible", ("calibrate", "--model", "m"),
            ('"hidden_size" 100 does not split into "num_attention_heads" 3',),
            files=model(config(hidden_size=100, num_attention_heads=3, num_key_value_heads=None,
                               head_dim=None))),
    Command("model-nested-json", ("check", "--model", "m"), ("argument --model:", "nests too deeply"),
            files=model(NESTED)),
    Command("model-not-utf8", ("calibrate", "--model", "m"), ("argument --model:", "is not UTF-8 text")),
    Command("model-unknown-user", ("check", "--model", f"{NOBODY}/m"),
            ("argument --model:", "cannot be expanded")),
    Command("model-name-too-long", ("check", "--model", LONG), ("argument --model:", "File name too long")),
    Command("policy-nan", ("check", "--policy", "cli_nan:p", "--batch-sizes", "8"),
            ("enginedead check: error: --policy 'cli_nan:p': policy cli_nan: timeout_s(CPU, 8) "
             "returned nan",),
            files=returning("cli_nan", "float('nan')")),
    Command("policy-zero", ("check", "--policy", "cli_zero:p"),
            ("--policy 'cli_zero:p': policy cli_zero: timeout_s(CPU, 8) returned 0",),
            files=returning("cli_zero", "0")),
    Command("policy-exits", ("check", "--policy", "cli_exit:p"),
            ("--policy 'cli_exit:p': importing 'cli_exit' failed: SystemExit: 1",),
            files=policy_module("cli_exit", "import sys\nsys.exit(1)\n")),
    Command("policy-empty", ("check", "--policy", ""), ("argument --policy: no policy given",)),
    Command("stock-deadline-fraction", ("check", "--stock-deadline", "1.5"),
            ("argument --stock-deadline: '1.5' is not a whole number of seconds",)),
    Command("batch-sizes-empty", ("check", "--batch-sizes", ""),
            ("argument --batch-sizes: no batch sizes given",)),
    Command("headroom-inf", ("calibrate", "--headroom", "inf"),
            ("argument --headroom: 'inf' must be above 0",)),
    Command("headroom-nan", ("calibrate", "--headroom", "nan"),
            ("argument --headroom: 'nan' must be above 0",)),
    Command("max-tokens-zero", ("check", "--max-tokens", "0"),
            ("argument --max-tokens: '0' must be at least 1",)),
    # --- output paths: proven at the start, by the one writer (issue 22, 20.5) ------------------
    Command("report-in-proc", ("check", "--report", "/proc/x.json"),
            ("enginedead check: error: --report '/proc/x.json': cannot be created: making a file in '/proc' "
             "failed", "(/proc is the kernel's; it takes no new files)")),
    Command("log-in-sys", ("calibrate", "--log", "/sys/x.log"),
            ("enginedead calibrate: error: --log '/sys/x.log': cannot be created", "/sys is the kernel's")),
    Command("report-and-log-one-file", ("check", "--report", "same.json", "--log", "./same.json"),
            ("enginedead check: error: --report 'same.json': names the same file as --log './same.json'; "
             "each output needs a file of its own",)),
    Command("plot-and-log-one-file-by-a-link", ("calibrate", "--log", "p.png", "--plot", "link.png"),
            ("--plot 'link.png': names the same file as --log 'p.png'",),
            files={"p.png": "x"}, nodes={"link.png": "link:p.png"}),
    Command("report-fifo", ("check", "--report", "fifo"),
            ("enginedead check: error: --report 'fifo': ", "is a FIFO that nothing reads; writing to it "
             "would wait forever"), nodes={"fifo": "fifo"}),
    Command("log-fifo-check", ("check", "--log", "fifo"), ("--log 'fifo': ", "is a FIFO that nothing reads"),
            nodes={"fifo": "fifo"}),
    Command("log-fifo-calibrate", ("calibrate", "--log", "fifo"),
            ("enginedead calibrate: error: --log 'fifo': ", "is a FIFO that nothing reads"),
            nodes={"fifo": "fifo"}),
    Command("log-dangling-dir", ("check", "--log", "gone/check.log"),
            ("--log 'gone/check.log': ", "gone' is a symbolic link to '/nonexistent-enginedead-dir', which "
             "does not exist"), nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    Command("report-dangling-dir", ("check", "--report", "gone/sub/r.json"),
            ("--report 'gone/sub/r.json': ", "is a symbolic link to"),
            nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    Command("plot-dangling-dir", ("calibrate", "--plot", "gone/p.png"),
            ("enginedead calibrate: error: --plot 'gone/p.png': ", "is a symbolic link to"),
            nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    # --- deadlines vLLM cannot hold, and what is not a number (20.5) ------------------------------
    Command("policy-beyond-the-bound", ("check", "--policy", "cli_big:p"),
            ("--policy 'cli_big:p': policy cli_big: timeout_s(CPU, 8) returned 1000000000000.0; a deadline "
             f"must be at most {versions.MAX_DEADLINE_S} s, the longest wait vLLM can make",),
            files=returning("cli_big", "1e12")),
    Command("policy-returns-text", ("check", "--policy", "cli_600:p"),
            ("--policy 'cli_600:p': policy cli_600: timeout_s(CPU, 8) returned '600', not a number of "
             "seconds (str; give an int or a float)",),
            files=returning("cli_600", "'600'")),
    Command("stock-deadline-beyond-the-bound", ("check", "--stock-deadline", "10000000000000"),
            (f"argument --stock-deadline: '10000000000000' must be at most {versions.MAX_DEADLINE_S} s, the "
             "longest wait vLLM can make",)),
    # --- a long model path: its head and tail in the line (20.5) ----------------------------------
    Command("model-long-path", ("check", "--model", LONG_MODEL),
            ("enginedead check: error: --model ", '"vocab_size": -1 must be at least 1',
             "[long paths shortened; -v shows them whole]"),
            files=model(config(vocab_size=-1), LONG_MODEL)),
]


@pytest.mark.parametrize("case", COMMAND_CASES, ids=[c.id for c in COMMAND_CASES])
def test_bad_command_line_is_one_line_exit_2(
    tmp_path: Path, wired: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch, case: Command
) -> None:
    """Each bad command line: one line, exit 2, at once (a FIFO never hangs it: the run has a
    30 s limit), its special files untouched, and nothing left in the temporary directory."""
    if case.id == "plot-unknown-format":
        pytest.importorskip("matplotlib")
    nodes = make_nodes(tmp_path, case.nodes)
    files = dict(case.files)
    if case.id == "model-not-utf8":
        files.update(model(LATIN1))
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    done = enginedead(*case.args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert done.stdout == ""
    assert_clean(done.stdout + done.stderr)
    for needle in case.needles:
        assert needle in lines[0], (needle, lines[0])
    if case.id == "vllm-env-check-vllm-stock":
        assert "--policy" not in lines[0]  # the variable is to blame, not the valid policy name
    if case.id == "model-long-path":
        assert len(lines[0]) < 300 < len(LONG_MODEL) + 100, lines[0]
        assert LONG_MODEL not in lines[0] and str(tmp_path)[:20] in lines[0]  # the head ...
        assert "dddd/m/config.json" in lines[0]  # ... and the tail
    assert_untouched(nodes)
    assert leftovers(private_tmp) == []


# --- the same empty value, wherever it is given -----------------------------------------------

EMPTY = [
    ("enginedead_batch_sizes", "no batch sizes given"),
    ("enginedead_model", "no model directory given"),
    ("enginedead_policy", "no policy given"),
    ("enginedead_report", "no path given"),
    ("enginedead_busy_threshold", "'' is not a number"),
    ("enginedead_sample_interval", "'' is not a number of seconds"),
    ("enginedead_shard", "'' is not K/N"),
    ("enginedead_durations", "no path given"),
    ("enginedead_store_durations", "no path given"),
]


@pytest.mark.parametrize("source", ["flag", "env", "ini"])
@pytest.mark.parametrize(("name", "why"), EMPTY, ids=[n for n, _ in EMPTY])
def test_an_empty_value_is_refused_alike_from_every_source(
    downstream: Downstream, monkeypatch: pytest.MonkeyPatch, source: str, name: str, why: str
) -> None:
    """An empty flag, variable or ini key is the same usage error: never a silent fall-through."""
    downstream.copy("plain")
    args: list[str] = []
    if source == "flag":
        args.append(f"--{name.replace('_', '-')}=")
        where = f"--{name.replace('_', '-')}='' (from command line)"
    elif source == "env":
        monkeypatch.setenv(name.upper(), "")
        where = f"{name.upper()}='' (from environment)"
    else:
        downstream.pytester.makeini(f"[pytest]\n{name} =\n")
        where = f"{name} = '' (from tox.ini)"
    result = downstream.run(*args)
    line = usage_line(result)
    assert_clean(result.text)
    assert where in line and why in line, line


@pytest.mark.parametrize("source", ["flag", "env", "ini"])
def test_an_empty_switch_is_off_from_every_source(
    downstream: Downstream, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """The one exception: a switch (--enginedead-guard) reads an empty value as off."""
    downstream.copy("plain")
    if source == "env":
        monkeypatch.setenv("ENGINEDEAD_GUARD", "")
    elif source == "ini":
        downstream.pytester.makeini("[pytest]\nenginedead_guard =\n")
    result = downstream.run()
    assert result.ret == pytest.ExitCode.OK, result.text


# --- what is understood, and what a marker on a group means ------------------------------------


def test_a_toml_list_of_batch_sizes_is_understood(downstream: Downstream) -> None:
    """``enginedead_batch_sizes = [2, 4]`` in [tool.pytest.ini_options] means 2,4, without a warning."""
    downstream.pytester.makepyprojecttoml("[tool.pytest.ini_options]\nenginedead_batch_sizes = [2, 4]\n")
    downstream.pytester.makepyfile(
        test_sized="def test_sized(engine_batch_size):\n    assert engine_batch_size\n"
    )
    result = downstream.run("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_sized[[]bs2[]] PASSED*", "*test_sized[[]bs4[]] PASSED*"])
    assert "Warning" not in result.text


def test_group_markers_apply_to_the_engine_tests_only(
    downstream: Downstream, tripwire: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module's ``pytestmark`` or a class's marker covers its engine tests; the plain tests
    beside them run as usual.  Only a marker on the plain test itself is an error."""
    monkeypatch.setattr(registry, "known_architectures", lambda: KNOWN)
    downstream.pytester.makepyfile(test_group=textwrap.dedent("""
        import pytest

        pytestmark = pytest.mark.enginedead_timeout(2)


        def test_engine(vllm_engine):
            raise AssertionError("deselected: never runs")


        def test_plain():
            pass


        @pytest.mark.enginedead_inject(slow_s_per_seq=0.01)
        class TestGroup:
            def test_plain_in_class(self):
                pass
    """))
    result = downstream.run("-k", "plain", "-rA")
    result.assert_outcomes(passed=2, deselected=2)
    assert_clean(result.text)


# --- before the first engine: a run with vLLM present, watched by the tripwire -------------------

needs_vllm = pytest.mark.skipif(versions.installed_version() is None, reason="needs vLLM installed")


def test_the_tripwire_is_armed_in_subprocesses(wired: Path) -> None:
    """Control: a subprocess carries the wire, and it fires on the module an engine start
    imports first (``from vllm import LLM`` is ``vllm.entrypoints.llm``), recording it."""
    probe = "import sys; sys.meta_path[0].find_spec('vllm.entrypoints.llm')"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode != 0 and "tripwire: vllm.entrypoints.llm" in done.stderr, done.stderr[-2000:]
    assert "vllm.entrypoints.llm" in wired.read_text()
    wired.unlink()  # seen: the fixture's own check is for the runs that must not start one


@needs_vllm
@pytest.mark.parametrize(
    ("args", "files", "code", "needle"),
    [
        (("--enginedead-report=afile/r.json",), {"afile": "x"}, 4, "is not a directory"),
        (("--enginedead-model=m",), model(config(vocab_size=-1)), 4, '"vocab_size": -1 must be at least 1'),
        (("--enginedead-policy=pre_nan:p",), returning("pre_nan", "float('nan')"), 1, "returned nan"),
        ((), {"test_engine.py": marked("enginedead_timeout(0.5)", "vllm_engine")}, 1,
         "seconds=0.5 is not a whole number of seconds"),
    ],
    ids=["report-path", "model-config", "policy-value", "marker"],
)
def test_checked_before_the_first_engine_starts(
    downstream: Downstream, wired: Path, args: tuple[str, ...], files: dict[str, str], code: int, needle: str
) -> None:
    """With vLLM installed and engine tests planned, each bad input ends the run (or its tests)
    before any engine starts: the import tripwire stays untouched (it does trip on a good one)."""
    (downstream.path / "test_engine.py").write_text(ENGINE)
    for name, content in files.items():
        (downstream.path / name).parent.mkdir(parents=True, exist_ok=True)
        (downstream.path / name).write_text(content)
    result = downstream.run(*args, in_subprocess=True, timeout=120)
    assert result.ret == code, result.text[-3000:]
    assert needle in result.text
    assert_clean(result.text)
    assert "engine failed to start" not in result.text and "tripwire" not in result.text


# --- output paths and the xdist door: each case without -n and with -n 2, alike -----------------------

OK = "ok"


@dataclass(frozen=True)
class Twin(Case):
    """A case run twice, as ``pytest -p enginedead`` and as ``pytest -p enginedead -p xdist -n 2``:
    the same outcome both ways (for a usage error: exactly the same one line, exit 4).
    ``{repo}`` in a needle is the repo's path (whole only under ``-v``: a long line is shortened)."""

    #: special files the case makes first (see ``make_nodes``); each must be untouched after
    nodes: dict[str, str] = field(default_factory=dict)


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
BOUND = (f"must be at most {versions.MAX_DEADLINE_S} s, the longest wait vLLM can make "
         "(Python's threading.TIMEOUT_MAX)")
#: a conftest (standing for any plugin) that refuses the collection; "enginedead: " lets usage_line read it
REFUSING_CONFTEST = ("import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
                     "    raise pytest.UsageError('enginedead: a conftest refused this collection')\n")

TWINS = [
    # --- shards and durations (issue 21.3): refused on the controller as on a plain run ------------
    Twin("shard-out-of-range", ("--enginedead-shard='2/1' (from command line)", "there is no shard 2 of 1"),
         args=("--enginedead-shard=2/1",), suite=ENGINE),
    Twin("durations-other-release", ("was recorded on vLLM '0.1.0', this run has",),
         args=("--enginedead-shard=1/2", "--enginedead-durations=d.json"), suite=ENGINE,
         files={"d.json": '{"enginedead_durations": 1, "vllm": "0.1.0", "tests": {}}'}),
    # --- the report path (issue 22: never replace a device, never lose a report; 20.5) ----------------
    Twin("report-char-device", (), args=("--enginedead-report={repo}/nulldev",), nodes={"nulldev": "chr"},
         kind=OK),
    Twin("report-dev-null", (), args=("--enginedead-report=/dev/null",), kind=OK),
    Twin("report-fifo", ("--enginedead-report='", "/fifo' (from command line): '",
                         "/fifo' is a FIFO that nothing reads; writing to it would wait forever"),
         args=("--enginedead-report={repo}/fifo",), nodes={"fifo": "fifo"}),
    Twin("report-dangling-dir", ("--enginedead-report='", "(from command line): '",
                                 "/gone' is a symbolic link to '/nonexistent-enginedead-dir', "
                                 "which does not exist; make that directory or give another path"),
         args=("--enginedead-report={repo}/gone/r.json",),
         nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    Twin("env-report-dangling-dir", ("ENGINEDEAD_REPORT='gone/sub/r.json' (from environment):",
                                     "gone' is a symbolic link to"),
         env={"ENGINEDEAD_REPORT": "gone/sub/r.json"}, nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    Twin("report-in-proc", ("--enginedead-report='/proc/x.json' (from command line): cannot be created: "
                            "making a file in '/proc' failed",
                            "(/proc is the kernel's; it takes no new files)"),
         args=("--enginedead-report=/proc/x.json",), suite=ENGINE),
    Twin("env-report-in-sys", ("ENGINEDEAD_REPORT='/sys/x.json' (from environment): cannot be created",
                               "(/sys is the kernel's; it takes no new files)"),
         env={"ENGINEDEAD_REPORT": "/sys/x.json"}, suite=ENGINE),
    # --- the model, checked once in the controller under xdist (issue 22) ------------------------------
    Twin("model-negative-vocab",
         ("(from command line): ", '/m/config.json: "vocab_size": -1 must be at least 1'),
         args=("--enginedead-model=m",), files=model(config(vocab_size=-1)), suite=ENGINE),
    Twin("model-unknown-architecture", (f"{FIXTURES}/unknown-arch/config.json names architecture "
                                        "NoSuchModelForCausalLM, which vLLM",
                                        "--enginedead-model=", "(from command line): "),
         args=(f"--enginedead-model={FIXTURES / 'unknown-arch'}",), suite=SERVER),
    Twin("model-long-path", ('"vocab_size": -1 must be at least 1',
                             "[long paths shortened; -v shows them whole]"),
         args=(f"--enginedead-model={LONG_MODEL}",), files=model(config(vocab_size=-1), LONG_MODEL),
         suite=ENGINE),
    Twin("model-long-path-verbose", (f'{{repo}}/{LONG_MODEL}/config.json: "vocab_size": -1',),
         args=(f"--enginedead-model={LONG_MODEL}", "-v"), files=model(config(vocab_size=-1), LONG_MODEL),
         suite=ENGINE),
    Twin("a-plugin-refuses-the-collection", ("enginedead: a conftest refused this collection",),
         files={"conftest.py": REFUSING_CONFTEST}, suite=ENGINE),
    # --- deadlines vLLM cannot hold, and a policy's text (20.5) ----------------------------------------
    Twin("deadlines-beyond-the-bound",
         (f"policy pol_big: timeout_s(CPU, 8) returned 1000000000000.0; a deadline {BOUND}",
          f"@pytest.mark.enginedead_timeout: seconds=1000000000000.0 {BOUND}",
          f"vllm_engine_factory: timeout_s=1000000000000 {BOUND}"),
         args=("--enginedead-policy=pol_big:p", "--enginedead-batch-sizes=8"),
         files=returning("pol_big", "1e12"), suite=DEADLINES, kind=TEST),
    Twin("policy-returns-text", ("policy pol_600: timeout_s(CPU, 8) returned '600', not a number of seconds "
                                 "(str; give an int or a float)",),
         args=("--enginedead-policy=pol_600:p", "--enginedead-batch-sizes=8"),
         files=returning("pol_600", "'600'"), suite=ENGINE, kind=TEST),
]

#: vLLM's model registry, stubbed in every process a run starts (xdist workers too): importing the
#: real one costs ~12 s a process; what is under test is who checks, and what the line says
REGISTRY_STUB = """
import pytest_enginedead.compat.registry as _registry
import pytest_enginedead.compat.versions as _versions


def _known_architectures():
    with open(os.environ["ENGINEDEAD_TEST_REGISTRY_CALLS"], "a") as f:  # who asked: a worker, or not
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "controller") + "\\n")
    return {"LlamaForCausalLM"}


_registry.known_architectures = _known_architectures
_versions.vllm_missing_reason = lambda: None
"""


@pytest.fixture
def stub_registry(wired: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The registry stub, in this process and (through the tripwire's sitecustomize) in its children;
    yields the file where the children record who asked it."""
    with open(tmp_path / "tripwire-site" / "sitecustomize.py", "a") as f:
        f.write(REGISTRY_STUB)
    calls = tmp_path / "registry-calls"
    monkeypatch.setenv("ENGINEDEAD_TEST_REGISTRY_CALLS", str(calls))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # ours, when this suite runs under xdist
    monkeypatch.setattr(registry, "known_architectures", lambda: {"LlamaForCausalLM"})
    return calls


@pytest.mark.parametrize("case", TWINS, ids=[c.id for c in TWINS])
def test_alike_with_and_without_xdist(
    downstream: Downstream, tripwire: list[str], stub_registry: Path, private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch, case: Twin,
) -> None:
    """Without ``-n`` and with ``-n 2`` (where the controller collects nothing), the same input
    gives the same outcome: a usage error is exactly the same one line and exit 4, never xdist's
    INTERNALERROR; a device or FIFO given as the report is untouched (same type, same inode); no
    engine starts, and nothing is left in the temporary directory."""
    args = prepare(downstream.path, case, monkeypatch)
    nodes = make_nodes(downstream.path, case.nodes)
    needles = [n.replace("{repo}", str(downstream.path)) for n in case.needles]
    plain = downstream.run(*args, "-rfE")
    n2 = downstream.run(*args, "-rfE", "-n", "2", plugins=["xdist"], in_subprocess=True, timeout=120)
    for result in (plain, n2):
        assert_clean(result.text)
    if case.kind == USAGE:
        line = usage_line(plain)
        assert usage_line(n2) == line
        for needle in needles:
            assert needle in line, (needle, line)
    elif case.kind == TEST:
        assert plain.ret == n2.ret == pytest.ExitCode.TESTS_FAILED, n2.text[-3000:]
        assert plain.outcomes.get("failed", 0) + plain.outcomes.get("errors", 0) == len(
            [ln for ln in case.suite.splitlines() if ln.startswith("def test_")]
        ), plain.outcomes
        for result in (plain, n2):
            assert result.outcomes.get("passed", 0) == 0, result.outcomes
            shown = [ln for ln in result.stdout.lines if not ln.startswith(("FAILED ", "ERROR ", "E "))]
            for needle in needles:  # the failure's own section holds the message itself
                assert any(needle in ln for ln in shown), (needle, result.text[-3000:])
    else:
        assert plain.ret == n2.ret == pytest.ExitCode.OK, (plain.text[-3000:], n2.text[-3000:])
        assert plain.outcomes == n2.outcomes
    if case.id == "model-long-path":
        assert len(line) < 300 < len(str(downstream.path / LONG_MODEL)), line
        assert LONG_MODEL not in line and "dddd/m/config.json" in line, line
    if case.id == "model-unknown-architecture":  # under -n 2 the controller asked, once; no worker did
        assert stub_registry.read_text().split() == ["controller"]
    assert_untouched(nodes)
    assert leftovers(private_tmp) == []


def test_a_fifo_with_a_reader_gets_the_report(downstream: Downstream, private_tmp: Path) -> None:
    """A FIFO somebody reads is written through, in place: the reader gets the whole report, and
    the FIFO is still a FIFO."""
    downstream.copy("plain")
    nodes = make_nodes(downstream.path, {"fifo": "fifo"})
    reader = os.open(downstream.path / "fifo", os.O_RDONLY | os.O_NONBLOCK)  # a reader, before the run
    try:
        result = downstream.run(f"--enginedead-report={downstream.path / 'fifo'}")
        assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
        data = b""
        while chunk := os.read(reader, 65536):
            data += chunk
    finally:
        os.close(reader)
    report = json.loads(data)
    assert report["schema_version"] == 1 and report["tests"] == []
    assert_untouched(nodes)
    assert leftovers(private_tmp) == []


def test_a_report_path_that_stops_taking_output_is_one_line_at_the_end(downstream: Downstream) -> None:
    """Proven at the start, the report's directory is replaced by a file during the run: the end
    says so in one line and the exit status is not 0 (it was a traceback), the tests' outcome
    stays in the summary."""
    downstream.pytester.makepyfile(test_spoil="""
        import os, shutil

        def test_spoils_the_report_directory():
            shutil.rmtree("out", ignore_errors=True)
            with open("out", "w") as f:
                f.write("not a directory")
    """)
    (downstream.path / "out").mkdir()
    result = downstream.run(f"--enginedead-report={downstream.path / 'out' / 'r.json'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.text[-3000:]
    assert_clean(result.text)
    lines = [ln for ln in result.stderr.lines if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: enginedead: the report was not written: "), lines
    assert "out/r.json' (from command line): cannot be written" in lines[0]
    result.assert_outcomes(passed=1)


def test_a_report_through_a_symlink_replaces_the_file_not_the_link(downstream: Downstream) -> None:
    """``latest.json -> runs/1.json``: the file the link names gets the report; the link stays."""
    downstream.copy("plain")
    (downstream.path / "runs").mkdir()
    (downstream.path / "runs" / "1.json").write_text("old")
    (downstream.path / "latest.json").symlink_to("runs/1.json")
    result = downstream.run(f"--enginedead-report={downstream.path / 'latest.json'}")
    assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
    assert (downstream.path / "latest.json").is_symlink()
    assert json.loads((downstream.path / "runs" / "1.json").read_text())["schema_version"] == 1
    assert sorted(os.listdir(downstream.path / "runs")) == ["1.json"]  # no temporary sibling left


# --- nothing left in the temporary directory ------------------------------------------------------


def leftovers(tmp: Path) -> list[str]:
    """What the plugin or the command left: run directories, logs, an output's temporary sibling."""
    return sorted(p.name for p in tmp.iterdir() if p.name.lstrip(".").startswith("enginedead"))


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of our own, for this process and the ones it starts."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    return tmp


def test_the_reaper_starts_cleanly_and_leaves_nothing(private_tmp: Path) -> None:
    """The reaper starts without runpy's RuntimeWarning; its registry goes with it."""
    script = ("import time\nfrom pytest_enginedead.harness.cleanup import Reaper\n"
              "r = Reaper()\ntime.sleep(1.0)\nassert r.proc.poll() is None\nr.close()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the reaper shares this stderr: nothing from runpy, nothing at all
    assert leftovers(private_tmp) == []


def test_an_engines_run_directory_goes_with_it(private_tmp: Path) -> None:
    """Each engine's run directory (``enginedead-*``) is removed when the engine stops."""
    from pytest_enginedead.harness.base import EngineBase
    from pytest_enginedead.logic.planning import EngineSpec

    engine = EngineBase(EngineSpec(BUNDLED_MODEL, 8))
    assert leftovers(private_tmp) == [os.path.basename(engine.run_dir)]
    engine.stop()
    assert leftovers(private_tmp) == []


def test_xdist_leaves_no_groups_directory(downstream: Downstream, private_tmp: Path) -> None:
    """The scheduler's groups directory is removed at the end of an xdist run."""
    result = downstream.copy("plain").run("-n", "2", "--dist", "loadgroup", plugins=["xdist"],
                                          in_subprocess=True, timeout=120)
    assert result.ret == pytest.ExitCode.OK, result.text[-3000:]
    assert leftovers(private_tmp) == []


def test_check_refused_by_pytest_is_exit_2_and_leaves_nothing(
    tmp_path: Path, wired: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``enginedead check -- --no-such-flag``: the regression run's pytest refuses its arguments
    before any engine; the command says so in one line, exits 2, and its scratch directory
    is gone.  (In-process, with vLLM's presence and registry stubbed: the run is real.)"""
    from pytest_enginedead import command

    monkeypatch.setattr(versions, "installed_version", lambda: "0.32.0")
    monkeypatch.setattr(registry, "known_architectures", lambda: KNOWN)
    log = tmp_path / "check.log"
    code = command.main(["check", "--log", str(log), "--", "--no-such-flag"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "pytest refused the run:" in lines[0], lines
    assert "--no-such-flag" in lines[0]
    assert_clean(out + err)
    assert leftovers(private_tmp) == []


def test_check_clears_an_inherited_guard_and_says_so(
    tmp_path: Path, wired: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An operator's production ``ENGINEDEAD_GUARD*`` (even a value the guard would refuse) does
    not reach the check's regression run, whose stock runs must stay unguarded: the command
    clears it, the header says which it cleared, and nothing is refused for it."""
    from pytest_enginedead import command
    from pytest_enginedead.commands import check
    from pytest_enginedead.logic import checking

    shell = {"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "soon", "ENGINEDEAD_BUSY_THRESHOLD": "0.1"}
    env, cleared = check.regression_environment({**shell, "PATH": "/usr/bin"},
                                              checking.plan_for(BUNDLED_MODEL, [8, 64]))
    assert not [k for k in env if k.startswith("ENGINEDEAD_GUARD")]
    assert env["PATH"] == "/usr/bin" and env["ENGINEDEAD_BUSY_THRESHOLD"] == "0.1"  # the others still count
    assert cleared == ["ENGINEDEAD_GUARD='1'", "ENGINEDEAD_GUARD_HANG_S='soon'"]
    for name, value in shell.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(versions, "installed_version", lambda: "0.32.0")
    monkeypatch.setattr(registry, "known_architectures", lambda: KNOWN)
    code = command.main(["check", "--log", str(tmp_path / "check.log"), "--", "--no-such-flag"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)  # pytest refused the extra argument: no engine, and not the guard
    said = ("enginedead check: cleared ENGINEDEAD_GUARD='1', ENGINEDEAD_GUARD_HANG_S='soon' inherited from "
            "the environment: the stock and policy runs are unguarded (--guard adds a guarded run)")
    assert said in out, out
    assert_clean(out + err)
