"""The markers: registered, documented, parsed; a bad argument fails only its test.

Engine markers (``enginedead_inject``, ``enginedead_timeout``, ``enginedead_batch_sizes``)
are read when a test asks for ``vllm_engine``.  A bad one fails that test in setup,
before any engine starts: these tests make starting one an error.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_enginedead.compat import registry
from pytest_enginedead.harness.engines.offline import Engine
from pytest_enginedead.logic.inputs.arguments import BadMarker
from pytest_enginedead.pytest_plugin import markers
from tests.support import examples
from tests.support.badinput import (
    KNOWN,
    TEST,
    Alike,
    Case,
    assert_alike_with_and_without_xdist,
    assert_bad_input_is_one_line,
    assert_clean,
    marked,
    returning,
)
from tests.support.downstream import Downstream

MARKERS = (
    "enginedead_batch_sizes",
    "enginedead_invariants",
    "enginedead_timeout",
    "enginedead_guard",
    "enginedead_inject",
)


@pytest.fixture
def no_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting a real engine becomes a loud error in this test's pytester runs."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("ENGINE STARTED: a bad marker must fail before any engine starts")

    monkeypatch.setattr(Engine, "start", refuse)


# --- registration and documentation -----------------------------------------------------


def test_all_four_markers_are_clean_under_strict_markers(downstream: Downstream) -> None:
    """Using every marker with --strict-markers raises no 'not found in markers' error.

    The example's test asks for no engine, so its engine markers mean nothing: it errors
    in setup with the one line saying so (the invariants marker alone would have been fine).
    """
    result = downstream.copy(examples.ALL_MARKERS).run("--strict-markers")
    result.assert_outcomes(errors=1)
    assert "not found in `markers`" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines([
        "*@pytest.mark.enginedead_batch_sizes, @pytest.mark.enginedead_inject, "
        "@pytest.mark.enginedead_timeout on a test that uses no engine*"
    ])


def test_unregistered_marker_still_fails_under_strict_markers(downstream: Downstream) -> None:
    """Control: --strict-markers does catch an unregistered name (a typo of ours)."""
    result = downstream.copy(examples.MARKER_TYPO).run("--strict-markers")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*'enginedead_invariant' not found in `markers`*"])


def test_markers_lists_every_marker(downstream: Downstream) -> None:
    """``pytest --markers`` shows each marker with its signature."""
    result = downstream.run("--markers")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.enginedead_batch_sizes(*sizes):*",
            "@pytest.mark.enginedead_invariants(*names, cap_s=None, headroom=None*",
            "@pytest.mark.enginedead_timeout(seconds):*",
            "@pytest.mark.enginedead_guard(hang_s=None, policy=None):*",
            "@pytest.mark.enginedead_inject(slow_s_per_seq=0.0, hang_at_step=None, crash_at_step=None, "
            "spin_at_step=None, ranks=None, nodes=None):*",
        ],
        consecutive=False,
    )


# --- bad marker arguments fail that test, before any engine ------------------------------

BAD_ENGINE_MARKERS = [
    (
        "enginedead_inject(slow=1.0)",
        "@pytest.mark.enginedead_inject got unknown argument(s) slow; it takes "
        "slow_s_per_seq, hang_at_step, crash_at_step",
    ),
    ("enginedead_inject(0.5)", "@pytest.mark.enginedead_inject takes keyword arguments only: slow_s_per_seq"),
    (
        "enginedead_inject(slow_s_per_seq='fast')",
        "@pytest.mark.enginedead_inject: slow_s_per_seq='fast' is not a number",
    ),
    (
        "enginedead_inject(slow_s_per_seq=-1)",
        "@pytest.mark.enginedead_inject: slow_s_per_seq=-1 must be >= 0",
    ),
    (
        "enginedead_inject(hang_at_step=0)",
        "@pytest.mark.enginedead_inject: hang_at_step=0 must be a step number >= 1",
    ),
    (
        "enginedead_inject(crash_at_step=1.5)",
        "@pytest.mark.enginedead_inject: crash_at_step=1.5 must be a step number >= 1",
    ),
    ("enginedead_timeout()", "@pytest.mark.enginedead_timeout takes one argument: seconds"),
    ("enginedead_timeout(1, 2)", "@pytest.mark.enginedead_timeout takes one argument: seconds"),
    (
        "enginedead_timeout(0)",
        "@pytest.mark.enginedead_timeout: seconds=0 is not a whole number of seconds >= 1; "
        "vLLM's deadline (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS) is parsed with int()",
    ),
    (
        "enginedead_timeout(1.5)",
        "@pytest.mark.enginedead_timeout: seconds=1.5 is not a whole number of seconds >= 1",
    ),
    ("enginedead_timeout('2')", "@pytest.mark.enginedead_timeout: seconds='2' is not a number"),
    (
        "enginedead_timeout(secs=2)",
        "@pytest.mark.enginedead_timeout got unknown argument(s) secs; it takes seconds",
    ),
    ("enginedead_batch_sizes()", "@pytest.mark.enginedead_batch_sizes(): needs at least one batch size"),
    (
        "enginedead_batch_sizes(0)",
        "@pytest.mark.enginedead_batch_sizes(0,): batch size 0 is not a positive integer",
    ),
    ("enginedead_batch_sizes('8')", "batch size '8' is not a positive integer"),
    (
        "enginedead_batch_sizes(8, per_seq=1)",
        "@pytest.mark.enginedead_batch_sizes got unknown argument(s) per_seq",
    ),
]


def test_bad_engine_markers_fail_in_setup_before_any_engine(
    downstream: Downstream, no_engines: None
) -> None:
    """Each bad engine marker errors its own test in setup, with its message; no engine starts."""
    body = ["import pytest", ""]
    for i, (marker, _) in enumerate(BAD_ENGINE_MARKERS):
        body += [f"@pytest.mark.{marker}", f"def test_bad_{i}(vllm_engine):"]
        body += ["    raise AssertionError('ran')", ""]
    body += ["def test_plain():", "    pass", ""]
    downstream.pytester.makepyfile(test_bad="\n".join(body))
    result = downstream.run("--enginedead-batch-sizes=8", "-rE")
    text = result.stdout.str()
    result.assert_outcomes(passed=1, errors=len(BAD_ENGINE_MARKERS))
    for i, (marker, message) in enumerate(BAD_ENGINE_MARKERS):
        assert f"ERROR at setup of test_bad_{i}[" in text, marker
        assert message in text, (marker, message)
    assert "ENGINE STARTED" not in text
    assert "engines started" not in text  # the summary only appears once one ran
    assert "ran')" not in text and "Traceback" not in text


def test_bad_invariants_marker_arguments(downstream: Downstream) -> None:
    """Unknown or malformed enginedead_invariants arguments fail that test only."""
    cases = [
        (
            "enginedead_invariants('capped', cap=5)",
            "@pytest.mark.enginedead_invariants got unknown argument(s) cap; it takes cap_s, headroom, "
            "step_times",
        ),
        (
            "enginedead_invariants()",
            "@pytest.mark.enginedead_invariants needs at least one invariant name; valid: cpu_gt_gpu,",
        ),
        ("enginedead_invariants(42)", "@pytest.mark.enginedead_invariants: unknown invariant 42; valid: "),
        (
            "enginedead_invariants('capped', cap_s='high')",
            "@pytest.mark.enginedead_invariants: cap_s='high' is not a number",
        ),
        (
            "enginedead_invariants('headroom', headroom=-1)",
            "@pytest.mark.enginedead_invariants: headroom=-1 must be >= 0",
        ),
        (
            "enginedead_invariants('headroom', step_times={})",
            "step_times must be a non-empty {batch_size: seconds} mapping",
        ),
        ("enginedead_invariants('headroom', step_times={0: 1.0})", "step_times key 0 is not a batch size"),
        ("enginedead_invariants('headroom', step_times={8: 'x'})", "step_times[8]='x' is not a number"),
    ]
    body = ["import pytest", ""]
    for i, (marker, _) in enumerate(cases):
        body += [f"@pytest.mark.{marker}", f"def test_bad_{i}():", "    pass", ""]
    body += ["@pytest.mark.enginedead_invariants('capped')", "def test_good():", "    pass", ""]
    downstream.pytester.makepyfile(test_bad="\n".join(body))
    result = downstream.run("-rA")
    result.assert_outcomes(passed=1, failed=len(cases))
    text = result.stdout.str()
    for marker, message in cases:
        assert message in text, (marker, message)
    assert "PASSED test_bad.py::test_good" in text
    assert "Traceback" not in text


# --- the parsers behind the markers -----------------------------------------------------


def mark(name: str, *args: object, **kwargs: object) -> pytest.Mark:
    return getattr(pytest.mark, name)(*args, **kwargs).mark


def test_good_marker_arguments_parse() -> None:
    """Valid arguments come back typed; duplicates dropped; seconds by position or name."""
    assert markers.batch_sizes(mark("enginedead_batch_sizes", 8, 64, 8)) == (8, 64)
    assert markers.timeout(mark("enginedead_timeout", 2)) == 2.0
    assert markers.timeout(mark("enginedead_timeout", seconds=3)) == 3.0
    assert markers.timeout(mark("enginedead_timeout", seconds=4.0)) == 4.0
    inj = markers.inject(mark("enginedead_inject", slow_s_per_seq=0.05, crash_at_step=2))
    assert (inj.slow_s_per_seq, inj.hang_at_step, inj.crash_at_step) == (0.05, None, 2)
    assert not markers.inject(mark("enginedead_inject")).active
    req = markers.invariant_request(mark("enginedead_invariants", "headroom", headroom=4, step_times={8: 1}))
    assert req.names == ("headroom",) and req.headroom == 4.0 and req.step_times == {8: 1.0}
    assert req.cap_s is None


@pytest.mark.parametrize("value", [True, float("nan"), float("inf"), None])
def test_timeout_marker_rejects_non_numbers(value: object) -> None:
    with pytest.raises(BadMarker, match="is not a number"):
        markers.timeout(mark("enginedead_timeout", value))


def test_marker_docs_cover_every_marker() -> None:
    """Every marker is documented, under its own name, once."""
    assert [d.split("(")[0] for d in markers.DOCS] == list(MARKERS)
    assert set(MARKERS) == {d.split("(")[0] for d in markers.DOCS}


# --- bad input here: one line each (conventions: tests/support/badinput.py) ---------------------------------

CASES = [
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
    Case("marker-guard-hang-below-sampling",
         ("@pytest.mark.enginedead_guard: hang_s=0.1 is below 0.25 s, how often the guard looks at the "
          "worker",),
         suite=marked("enginedead_guard(hang_s=0.1)", "vllm_engine"), kind=TEST),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line(
    downstream: Downstream, no_engine: list[str], monkeypatch: pytest.MonkeyPatch, case: Case
) -> None:
    """Each of the markers' bad inputs: one line naming the value and its source, before any engine."""
    assert_bad_input_is_one_line(downstream, monkeypatch, case)


def test_group_markers_apply_to_the_engine_tests_only(
    downstream: Downstream, no_engine: list[str], monkeypatch: pytest.MonkeyPatch
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


# --- issues 36 and 37: each without -n and with -n 2, alike (conventions: tests/support/badinput.py) -----

ALIKE = [
    # the marker's guard policy is asked for its cap at the test's batch size, as the run's is
    Alike("marker-guard-policy-nan", ("@pytest.mark.enginedead_guard: policy='gp_nan:p': policy gp_nan: "
                                      "timeout_s(CPU, 2) returned nan; a deadline must be a finite number of "
                                      "seconds >= 1 (vLLM's smallest)",),
          args=("--enginedead-batch-sizes=2",), files=returning("gp_nan", "float('nan')"),
          suite=marked("enginedead_guard(policy='gp_nan:p')", "vllm_engine"), kind=TEST),
    Alike("marker-guard-policy-zero-at-a-large-batch",
          ("@pytest.mark.enginedead_guard: policy='gp_big:p': policy "
           "gp_big: timeout_s(CPU, 64) returned 0",),
          args=("--enginedead-batch-sizes=64",), files=returning("gp_big", "900 if max_num_seqs < 64 else 0"),
          suite=marked("enginedead_guard(policy='gp_big:p')", "vllm_engine"), kind=TEST),
    # the marker's batch size within what vLLM builds
    Alike("marker-batch-sizes-over-vllms",
          ("@pytest.mark.enginedead_batch_sizes(5000,): batch size 5000 is over "
           "4096, the largest an offline engine takes: vLLM refuses max_num_seqs "
           "above max_num_batched_tokens",),
          suite=marked("enginedead_batch_sizes(5000)", "vllm_engine"), kind=TEST),
    Alike("marker-batch-sizes-over-a-servers",
          ("@pytest.mark.enginedead_batch_sizes(3000,): batch size 3000 is "
           "over 2048, the largest a server takes",),
          suite=marked("enginedead_batch_sizes(3000)", "vllm_server"), kind=TEST),
]


@pytest.mark.processes
@pytest.mark.parametrize("case", ALIKE, ids=[c.id for c in ALIKE])
def test_alike_with_and_without_xdist(
    downstream: Downstream, no_engine: list[str], stub_registry: Path, private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch, case: Alike,
) -> None:
    """Each of the markers' new refusals: its test fails in one line naming the marker and the value,
    the same with -n 2, before any engine, nothing left."""
    assert_alike_with_and_without_xdist(downstream, stub_registry, private_tmp, monkeypatch, case)
