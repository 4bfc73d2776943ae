"""Timeout policies: the reference meets DESIGN.md's constraints; stock, calibrated, linear, loading."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import sys
from decimal import Decimal
from fractions import Fraction

import pytest

from pytest_enginedead import Backend, TimeoutPolicy
from pytest_enginedead.logic import releases
from pytest_enginedead.logic.timeouts.policies import (
    STOCK_DEADLINE_S,
    PolicyError,
    PolicyFailure,
    PolicyLike,
    Rule,
    fit_step_time,
    load_policy,
    policy_deadline,
)
from tests.support import examples

DEADLINE_ENV = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"

#: every batch size up to 1024, then powers of two far past any cap
BATCHES = [*range(1, 1025), *(2**k for k in range(11, 25))]
TOKENS: list[int | None] = [None, 512, 2048, 8192, 65536]


@pytest.fixture(scope="module")
def reference() -> TimeoutPolicy:
    return TimeoutPolicy.reference()


# --- the reference policy meets every DESIGN.md constraint ------------------------------


@pytest.mark.parametrize("tokens", TOKENS)
def test_reference_cpu_strictly_above_gpu(reference: TimeoutPolicy, tokens: int | None) -> None:
    """At every batch size, with and without a token budget, CPU > GPU."""
    for n in BATCHES:
        cpu, gpu = reference.timeout_s(Backend.CPU, n, tokens), reference.timeout_s(Backend.GPU, n, tokens)
        assert cpu > gpu, (n, tokens, cpu, gpu)


@pytest.mark.parametrize("backend", list(Backend))
@pytest.mark.parametrize("tokens", TOKENS)
def test_reference_grows_until_its_cap(
    reference: TimeoutPolicy, backend: Backend, tokens: int | None
) -> None:
    """Non-decreasing everywhere, strictly increasing below the cap, never above it."""
    cap = reference.ceiling_s(backend)
    assert math.isfinite(cap)
    values = [reference.timeout_s(backend, n, tokens) for n in BATCHES]
    for (n1, t1), (n2, t2) in itertools.pairwise(zip(BATCHES, values, strict=True)):
        assert t2 >= t1, (backend, tokens, n1, t1, n2, t2)
        if t1 < cap:
            assert t2 > t1, (backend, tokens, n1, t1, n2, t2)
    assert max(values) <= cap
    assert values[-1] == cap  # a huge batch reaches it


@pytest.mark.parametrize("backend", list(Backend))
def test_reference_never_below_stock(reference: TimeoutPolicy, backend: Backend) -> None:
    """No setup that survives vLLM's stock 300 s dies sooner under the reference."""
    assert STOCK_DEADLINE_S == 300.0
    for n, tokens in itertools.product(BATCHES, TOKENS):
        assert reference.timeout_s(backend, n, tokens) >= STOCK_DEADLINE_S


def test_reference_numbers(reference: TimeoutPolicy) -> None:
    """The documented rule: CPU 600 s + 10 s/seq (+ 0.02 s/token), capped at 2 h."""
    assert reference.name == "reference"
    assert reference.timeout_s(Backend.CPU, 8) == pytest.approx(680.0)
    assert reference.timeout_s(Backend.CPU, 64) == pytest.approx(1240.0)
    assert reference.timeout_s(Backend.CPU, 64, 1000) == pytest.approx(1260.0)
    assert reference.timeout_s(Backend.GPU, 64) == pytest.approx(332.0)
    assert reference.timeout_s(Backend.CPU, 10**6) == 7200.0
    assert reference.ceiling_s(Backend.CPU) == 7200.0
    assert reference.ceiling_s(Backend.GPU) == 1800.0


@pytest.mark.parametrize("spelling", ["cpu", "CPU", " Cpu ", Backend.CPU])
def test_backend_spellings(reference: TimeoutPolicy, spelling: str | Backend) -> None:
    """A backend may be given as the enum or its name in any case."""
    assert reference.timeout_s(spelling, 8) == reference.timeout_s(Backend.CPU, 8)


def test_backends_include_every_accelerator() -> None:
    """CPU, GPU and the other accelerators vLLM runs on."""
    assert {b.name for b in Backend} >= {"CPU", "GPU", "XPU", "TPU", "HPU", "NPU"}


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seqs", "error"),
    [(0, ValueError), (-8, ValueError), (True, TypeError), (8.0, TypeError), ("8", TypeError)],
)
def test_timeout_rejects_bad_batch_sizes(reference: TimeoutPolicy, seqs: object, error: type) -> None:
    """max_num_seqs must be a positive int (not a bool, float or string)."""
    with pytest.raises(error, match="max_num_seqs"):
        reference.timeout_s(Backend.CPU, seqs)  # type: ignore[arg-type]


def test_timeout_rejects_unknown_backend(reference: TimeoutPolicy) -> None:
    """An unknown backend is a ValueError that lists the valid ones."""
    with pytest.raises(ValueError, match=r"unknown backend 'quantum'; valid: cpu, gpu"):
        reference.timeout_s("quantum", 8)


def test_policy_needs_a_rule_per_backend() -> None:
    """A policy missing a backend's rule is refused at construction."""
    with pytest.raises(ValueError, match=r"has no rule for .*GPU"):
        TimeoutPolicy("partial", {Backend.CPU: Rule(600.0, 1.0)})


@pytest.mark.parametrize("seconds", [0, -1, float("nan")])
def test_fixed_rejects_non_positive(seconds: float) -> None:
    """A fixed deadline must be > 0 s."""
    with pytest.raises(ValueError, match="must be > 0"):
        TimeoutPolicy.fixed(seconds)


def test_timeout_policy_is_frozen(reference: TimeoutPolicy) -> None:
    """Neither the policy's fields nor its rules can be changed after construction."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        reference.name = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        reference.rules[Backend.CPU] = Rule(1.0, 0.0)  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        reference.rules[Backend.CPU].cap_s = 1.0  # type: ignore[misc]


def test_rules_given_as_strings_are_parsed() -> None:
    """Rule keys may be backend names; a caller's dict is copied, not aliased."""
    rules = {b.value: Rule(400.0, 1.0) for b in Backend}
    policy = TimeoutPolicy("named", rules)
    rules["cpu"] = Rule(1.0, 0.0)
    assert policy.timeout_s(Backend.CPU, 10) == 410.0


# --- vLLM's stock deadline -------------------------------------------------------------


def test_vllm_stock_is_300_s_flat() -> None:
    """Unset variable: 300 s at every backend and batch (the bug)."""
    stock = TimeoutPolicy.vllm_stock(environ={})
    assert stock.name == "vllm-stock"
    assert {stock.timeout_s(b, n) for b in Backend for n in (1, 8, 64, 4096)} == {300.0}


def test_vllm_stock_reads_the_variable() -> None:
    """VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS sets it, at every backend and batch."""
    stock = TimeoutPolicy.vllm_stock(environ={DEADLINE_ENV: "17"})
    assert {stock.timeout_s(b, n) for b in Backend for n in (1, 64)} == {17.0}


@pytest.mark.parametrize(
    ("raw", "why"),
    [("1.5", "not an integer"), ("abc", "not an integer"), ("  ", "is empty"), ("", "is empty"),
     ("0", "must be at least 1"), ("-5", "must be at least 1"), ("9" * 30, "longer than any wait")],
)
def test_vllm_stock_rejects_what_vllm_cannot_use(raw: str, why: str) -> None:
    """vLLM parses the variable with int(): '1.5' or a blank would crash it, 0 kills every step."""
    pattern = rf"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={re.escape(repr(raw))} \(from environment\).*{why}"
    with pytest.raises(ValueError, match=pattern):
        TimeoutPolicy.vllm_stock(environ={DEADLINE_ENV: raw})


@pytest.mark.parametrize(
    ("version", "expected"), [("0.8.5", 40.0), ("0.9.1", 300.0), ("0.9.2", 17.0), ("0.32.0+cpu", 17.0)]
)
def test_vllm_stock_follows_the_release(version: str, expected: float) -> None:
    """Before 0.9.2 the deadline is hard-coded, so the variable does not count."""
    stock = TimeoutPolicy.vllm_stock(environ={DEADLINE_ENV: "17"}, version=version)
    assert stock.timeout_s(Backend.CPU, 8) == expected


# --- the calibrated policy -------------------------------------------------------------


def test_calibrated_is_headroom_times_fitted_step() -> None:
    """Steps 2 s at batch 10 and 3 s at batch 20 fit 1 s + 0.1 s/seq; × 3, clamped."""
    policy = TimeoutPolicy.calibrated({10: 2.0, 20: 3.0}, headroom=3.0)
    assert policy.name == "calibrated"
    cpu = Backend.CPU
    assert policy.timeout_s(cpu, 10) == 300.0  # 6 s raw, raised to the stock floor
    assert policy.timeout_s(cpu, 1000) == pytest.approx(303.0)  # 3 × (1 + 100)
    assert policy.timeout_s(cpu, 10000) == pytest.approx(3003.0)
    assert policy.timeout_s(cpu, 30000) == 7200.0  # 9003 s raw, capped
    assert policy.ceiling_s(cpu) == 7200.0
    assert "3 x (1 s + 0.1 s/seq) on CPU" in policy.origin
    # other backends keep the reference rule
    assert policy.timeout_s(Backend.GPU, 64) == TimeoutPolicy.reference().timeout_s(Backend.GPU, 64)


def test_calibrated_floor_cap_and_backend() -> None:
    """Floor, cap and backend are the caller's; the token budget does not count."""
    policy = TimeoutPolicy.calibrated(
        [(10, 2.0), (20, 3.0)], headroom=2.0, floor_s=1.0, cap_s=100.0, backend="xpu"
    )
    assert policy.timeout_s(Backend.XPU, 10) == pytest.approx(4.0)  # 2 × (1 + 1)
    assert policy.timeout_s(Backend.XPU, 10, 10**6) == pytest.approx(4.0)
    assert policy.timeout_s(Backend.XPU, 1000) == 100.0
    assert policy.timeout_s(Backend.CPU, 8) == TimeoutPolicy.reference().timeout_s(Backend.CPU, 8)


@pytest.mark.parametrize("headroom", [0, -1.0])
def test_calibrated_rejects_bad_headroom(headroom: float) -> None:
    with pytest.raises(ValueError, match="headroom must be > 0"):
        TimeoutPolicy.calibrated({8: 1.0}, headroom=headroom)


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ({10: 2.0, 20: 3.0}, (1.0, 0.1)),  # exact line
        ([(8, 0.5), (8, 0.7)], (0.0, 0.6 / 8)),  # one batch size: proportional to it
        ({8: 2.0, 64: 1.0}, (1.5, 0.0)),  # falls with the batch: flat at the mean
        ({10: 1.0, 20: 3.0}, (0.0, 70.0 / 500.0)),  # would cross below 0: through the origin
    ],
)
def test_fit_step_time(samples: object, expected: tuple[float, float]) -> None:
    """Least squares ``a + b × batch`` with a, b never negative."""
    a, b = fit_step_time(samples)  # type: ignore[arg-type]
    assert (a, b) == pytest.approx(expected)
    assert a >= 0 and b >= 0


@pytest.mark.parametrize(
    "samples",
    [{}, [], {0: 1.0}, {-4: 1.0}, {8: -0.1}, {8: float("inf")}, {8: float("nan")}],
)
def test_fit_step_time_rejects_bad_samples(samples: object) -> None:
    with pytest.raises(ValueError, match=r"calibration needs|bad calibration sample"):
        fit_step_time(samples)  # type: ignore[arg-type]


# --- load_policy ------------------------------------------------------------------------


def test_load_builtin_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    """'reference' and 'vllm-stock' by name (surrounding blanks ignored)."""
    monkeypatch.delenv(DEADLINE_ENV, raising=False)
    ref = load_policy(" reference ")
    assert isinstance(ref, TimeoutPolicy) and ref.name == "reference"
    stock = load_policy("vllm-stock")
    assert isinstance(stock, TimeoutPolicy) and stock.name == "vllm-stock"
    assert stock.timeout_s(Backend.CPU, 64) == 300.0
    monkeypatch.setenv(DEADLINE_ENV, "42")
    assert load_policy("vllm-stock").timeout_s(Backend.CPU, 64) == 42.0


def test_load_module_attr_from_search_path(pytester: pytest.Pytester) -> None:
    """module:attr imports from the search path, which is not left on sys.path."""
    pytester.copy_example(f"{examples.POLICY_MODULES}/edpolicy.py")
    path = str(pytester.path)
    before = list(sys.path)
    policy = load_policy("edpolicy:good", [path])
    assert sys.path == before
    assert isinstance(policy, PolicyLike)
    assert policy.timeout_s(Backend.CPU, 8) == 4800.0
    inner = load_policy("edpolicy:Holder.inner", [path])
    assert type(inner).__name__ == "Doubling"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("edpolicy_absent:good", "no module named 'edpolicy_absent'"),
        ("edpolicy:missing", "module 'edpolicy' has no attribute 'missing'"),
        ("edpolicy:not_a_policy", "edpolicy:not_a_policy is a str with no callable timeout_s"),
        ("edpolicy:no_callable", "is a NoCallable with no callable timeout_s"),
        ("edpolicy", "use reference, vllm-stock or module:attr, not 'edpolicy'"),
        (":good", "use reference, vllm-stock or module:attr"),
        ("edpolicy:", "use reference, vllm-stock or module:attr"),
        ("edpolicy_broken:x", "importing 'edpolicy_broken' failed: ZeroDivisionError"),
        ("edpolicy_needs:x", "importing 'edpolicy_needs' failed: No module named 'edpolicy_nowhere'"),
    ],
)
def test_load_policy_errors(pytester: pytest.Pytester, spec: str, message: str) -> None:
    """Every way a module:attr spec can be wrong is a PolicyError (a ValueError) saying which."""
    pytester.copy_example(examples.POLICY_MODULES)
    with pytest.raises(PolicyError) as info:
        load_policy(spec, [str(pytester.path)])
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


# --- the original report's own tests, ported by renaming its policy class ---------------------


def test_the_reports_tests_pass_on_a_default_timeout_policy() -> None:
    """``TimeoutPolicy()`` with no arguments is the reference policy."""
    policy = TimeoutPolicy()
    assert policy.timeout_s(Backend.CPU, 64) > policy.timeout_s(Backend.GPU, 64)
    assert policy.timeout_s(Backend.CPU, 128) > policy.timeout_s(Backend.CPU, 8)
    huge = policy.timeout_s(Backend.CPU, 100_000)
    assert math.isfinite(huge) and huge == policy.timeout_s(Backend.CPU, 10**7)
    assert policy.timeout_s(Backend.CPU, 1) >= 300
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.name = "changed"  # type: ignore[misc]
    assert policy.name == TimeoutPolicy.reference().name == "reference"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"base_s": 1.0, "per_seq_s": 1.0, "per_token_s": -0.1}, "per_token_s must be a finite number >= 0"),
        ({"base_s": float("nan"), "per_seq_s": 1.0}, "base_s must be a finite number >= 0"),
        ({"base_s": 1.0, "per_seq_s": 1.0, "cap_s": 10.0}, "cap_s must be a number >= floor_s (300.0)"),
    ],
)
def test_a_linear_policy_refuses_what_no_deadline_can_be(kwargs: dict[str, float], needle: str) -> None:
    from pytest_enginedead.logic.timeouts.policies import TimeoutPolicy

    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        TimeoutPolicy.linear(**kwargs)
    policy = TimeoutPolicy.linear(600.0, 10.0, 0.5, cap_s=5000.0)
    assert policy.timeout_s("cpu", 8, 100) == 600 + 80 + 50 and policy.timeout_s("cpu", 8) == 680
    assert policy.timeout_s("cpu", 1000, 10_000) == 5000  # the cap


# --- policy_deadline: the one place a policy is asked --------------------------------------


class Recording:
    """A policy that answers ``answer`` and remembers what it was asked."""

    name = "recording"

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.asked: list[tuple[Backend, int]] = []

    def timeout_s(
        self, backend: Backend, max_num_seqs: int, max_num_batched_tokens: int | None = None
    ) -> float:
        self.asked.append((backend, max_num_seqs))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[return-value]


def test_policy_deadline_asks_for_cpu_at_the_batch_size() -> None:
    policy = Recording(1240)
    assert policy_deadline(policy, "recording", 64) == 1240.0
    assert isinstance(policy_deadline(policy, "recording", 64), float)
    assert policy.asked == [(Backend.CPU, 64), (Backend.CPU, 64)]
    assert policy_deadline(TimeoutPolicy.reference(), "reference", 8) == 680.0


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (RuntimeError("no rule"), "policy p: timeout_s(CPU, 8) raised RuntimeError: no rule"),
        ("soon", "policy p: timeout_s(CPU, 8) returned 'soon', not a number of seconds"),
        (None, "policy p: timeout_s(CPU, 8) returned None, not a number of seconds"),
        (float("inf"), "policy p: timeout_s(CPU, 8) returned inf; a deadline must be a finite number"),
        (float("nan"), "returned nan; a deadline must be a finite number of seconds >= 1"),
        (0.5, "policy p: timeout_s(CPU, 8) returned 0.5; a deadline must be a finite number of seconds >= 1"),
        (-300, "returned -300; a deadline must be"),
    ],
)
def test_policy_deadline_failures_say_which_policy_returned_what(answer: object, message: str) -> None:
    with pytest.raises(PolicyFailure) as info:
        policy_deadline(Recording(answer), "p", 8)
    assert message in str(info.value)
    # one line for the user: not chained to the policy's own exception
    assert info.value.__context__ is None or info.value.__suppress_context__


def test_smallest_usable_deadline_is_one_second() -> None:
    assert policy_deadline(Recording(1), "p", 1) == 1.0
    assert policy_deadline(Recording(Fraction(5, 2)), "p", 1) == 2.5  # any real number


@pytest.mark.parametrize(("value", "why"), [
    ("600", "returned '600', not a number of seconds (str; give an int or a float)"),
    (True, "returned True, not a number of seconds (bool; give an int or a float)"),
    (Decimal("600"), "returned Decimal('600'), not a number of seconds (Decimal;"),
    (0.5, "returned 0.5; a deadline must be a finite number of seconds >= 1"),
])
def test_a_deadline_is_a_real_number_of_seconds(value: object, why: str) -> None:
    """A policy returning text or a bool is refused, not converted: float("600") and
    float(True) would make a number of what is a bug in the policy."""
    with pytest.raises(PolicyFailure) as err:
        policy_deadline(Recording(value), "p", 1)
    assert why in str(err.value)


def test_a_deadline_is_bounded_by_the_longest_wait_vllm_can_make() -> None:
    """1e12 s would overflow Python's waits inside vLLM and pytest-timeout's timer (INTERNALERROR);
    the bound is named in the message, and the largest deadline that fits passes."""
    with pytest.raises(PolicyFailure) as err:
        policy_deadline(Recording(1e12), "p", 8)
    most = releases.MAX_DEADLINE_S
    assert f"returned 1000000000000.0; a deadline must be at most {most} s" in str(err.value)
    assert "threading.TIMEOUT_MAX" in str(err.value)
    assert policy_deadline(Recording(releases.MAX_DEADLINE_S), "p", 8) == releases.MAX_DEADLINE_S
