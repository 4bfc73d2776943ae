"""The markers: registered, documented, parsed; a bad argument fails only its test.

Engine markers (``enginedead_inject``, ``enginedead_timeout``, ``enginedead_batch_sizes``)
are read when a test asks for ``vllm_engine``.  A bad one fails that test in setup,
before any engine starts: these tests make starting one an error.
"""

from __future__ import annotations

import pytest

from pytest_enginedead.face import markers
from pytest_enginedead.harness.offline import Engine
from pytest_enginedead.logic.arguments import BadMarker
from pytest_enginedead.logic.optiontable import OPTIONS
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
    result = downstream.copy("all_markers").run("--strict-markers")
    result.assert_outcomes(errors=1)
    assert "not found in `markers`" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines([
        "*@pytest.mark.enginedead_batch_sizes, @pytest.mark.enginedead_inject, "
        "@pytest.mark.enginedead_timeout on a test that uses no engine*"
    ])


def test_unregistered_marker_still_fails_under_strict_markers(downstream: Downstream) -> None:
    """Control: --strict-markers does catch an unregistered name (a typo of ours)."""
    result = downstream.copy("marker_typo").run("--strict-markers")
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
            "@pytest.mark.enginedead_inject(slow_s_per_seq=0.0, hang_at_step=None, crash_at_step=None):*",
        ],
        consecutive=False,
    )


def test_help_documents_every_option(downstream: Downstream) -> None:
    """``pytest --help`` works and documents every --enginedead-* flag and ini key."""
    result = downstream.run("--help")
    text = result.stdout.str()
    assert result.ret == 0, text + result.stderr.str()
    for opt in OPTIONS:
        assert opt.flag in text, opt.flag
        assert opt.name in text, opt.name  # the ini key
    assert "(default 0.05 = 5%)" in text


def test_header_names_policy_and_vllm(downstream: Downstream) -> None:
    """The session header says which policy and which vLLM are in force."""
    result = downstream.copy("plain").run()
    result.stdout.fnmatch_lines(["enginedead: policy=reference*, batch_sizes=8,64, vllm=*"])


# --- batch sizes: marker > command line > default ------------------------------------------

def test_batch_size_parametrization(downstream: Downstream) -> None:
    """engine_batch_size runs at each size, ids bsN; the marker overrides the option."""
    default = downstream.copy("sized").run("--collect-only", "-q")
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
