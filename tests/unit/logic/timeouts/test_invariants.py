"""Named invariants of a timeout policy: the checks, called directly."""

from __future__ import annotations

import pytest

from pytest_enginedead import Backend, TimeoutPolicy
from pytest_enginedead.logic.timeouts.invariants import NAMES, STANDARD_BATCH_SIZES, batch_grid
from pytest_enginedead.logic.timeouts.invariants import violations as check

VALID = "cpu_gt_gpu, grows_with_batch, capped, headroom, not_below_stock"


class Linear:
    """A policy without a cap: 300 s + 1 s per sequence on CPU, a flat 300 s elsewhere."""

    name = "linear"

    def timeout_s(
        self, backend: Backend, max_num_seqs: int, max_num_batched_tokens: int | None = None
    ) -> float:
        return 300.0 + max_num_seqs if backend is Backend.CPU else 300.0


class Dipping:
    """Grows, except that batch 64 gets less than batch 32."""

    def timeout_s(
        self, backend: Backend, max_num_seqs: int, max_num_batched_tokens: int | None = None
    ) -> float:
        base = 600.0 if backend is Backend.CPU else 300.0
        return base + (1.0 if max_num_seqs == 64 else float(max_num_seqs))


class Stepped:
    """Grows to batch 4, then sits at 500 s, below a declared cap of 900 s."""

    def timeout_s(
        self, backend: Backend, max_num_seqs: int, max_num_batched_tokens: int | None = None
    ) -> float:
        return min(400.0 + 25.0 * max_num_seqs, 500.0)


class Raising:
    def timeout_s(
        self, backend: Backend, max_num_seqs: int, max_num_batched_tokens: int | None = None
    ) -> float:
        raise RuntimeError("no rule for this backend")


@pytest.fixture(autouse=True)
def _no_deadline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm-stock reads VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS; keep it at its 300 s default."""
    monkeypatch.delenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", raising=False)


# --- the checks, called directly -------------------------------------------------------


def test_reference_meets_every_structural_invariant() -> None:
    """The reference breaks none of cpu_gt_gpu, grows_with_batch, capped, not_below_stock."""
    names = ["cpu_gt_gpu", "grows_with_batch", "capped", "not_below_stock"]
    assert check(TimeoutPolicy.reference(), names, batch_sizes=(3, 8, 64, 100_000)) == []


def test_stock_breaks_cpu_gt_gpu_and_grows_with_batch_with_the_numbers() -> None:
    """vLLM's flat 300 s: CPU equals GPU and nothing grows; it is flat, so 'capped' holds."""
    stock = TimeoutPolicy.vllm_stock(environ={})
    [cpu_gt_gpu] = check(stock, ["cpu_gt_gpu"])
    assert cpu_gt_gpu == (
        "cpu_gt_gpu: timeout_s(CPU, 1) = 300.0 s is not greater than "
        "timeout_s(GPU, 1) = 300.0 s; a CPU step is far slower than a GPU step"
    )
    grows = check(stock, ["grows_with_batch"])
    assert grows[0] == (
        "grows_with_batch: timeout_s(CPU, 1) = 300.0 s and timeout_s(CPU, 65536) = 300.0 s: "
        "it never grows with the batch"
    )
    assert len(grows) == len(Backend)  # one line per backend
    assert check(stock, ["capped", "not_below_stock"]) == []


def test_grows_with_batch_finds_a_dip() -> None:
    """A policy that gives batch 64 less than batch 32 is caught at exactly that pair."""
    problems = check(Dipping(), ["grows_with_batch"])
    assert problems[0] == "grows_with_batch: timeout_s(CPU, 32) = 632.0 s but timeout_s(CPU, 64) = 601.0 s"


def test_flat_at_the_cap_is_allowed_but_flat_below_is_not() -> None:
    """Reaching the cap and staying there is fine; a plateau below the cap is not."""
    assert check(TimeoutPolicy.reference(), ["grows_with_batch"], batch_sizes=(10**6, 2 * 10**6)) == []
    problems = check(Stepped(), ["grows_with_batch"], cap_s=900.0)
    assert problems[0] == (
        "grows_with_batch: timeout_s(CPU, 4) = 500.0 s but timeout_s(CPU, 8) = 500.0 s "
        "(below its cap of 900.0 s)"
    )


def test_capped_catches_a_policy_that_never_stops_growing() -> None:
    """No cap declared and still growing at a huge batch: 'capped' fails with both values."""
    [problem] = check(Linear(), ["capped"])
    assert problem == (
        "capped: timeout_s(CPU, 1048576) = 1048876.0 s but timeout_s(CPU, 2097152) = "
        "2097452.0 s; it never stops growing (give cap_s= or a policy with a cap)"
    )


def test_capped_with_an_explicit_cap() -> None:
    """With cap_s given, the first batch above it is reported; the reference is within 2 h."""
    problems = check(Linear(), ["capped"], cap_s=1000.0)
    assert problems[0] == "capped: timeout_s(CPU, 1024) = 1324.0 s is above the cap of 1000.0 s"
    assert check(TimeoutPolicy.reference(), ["capped"], cap_s=7200.0) == []
    assert check(TimeoutPolicy.reference(), ["capped"], cap_s=3600.0)[0].startswith(
        "capped: timeout_s(CPU, 512) = 5720.0 s is above the cap of 3600.0 s"
    )


def test_not_below_stock() -> None:
    """A 10 s deadline would make a setup that works today die sooner."""
    [problem] = check(TimeoutPolicy.fixed(10.0), ["not_below_stock"])
    assert problem.startswith("not_below_stock: timeout_s(CPU, 1) = 10.0 s is below vLLM's stock 300 s")


def test_headroom_against_measured_steps() -> None:
    """Reference: 1240 s at batch 64 ≥ 3 × 300 s passes; ≥ 5 × 300 s does not; stock fails."""
    steps = {8: 0.5, 64: 300.0}
    assert check(TimeoutPolicy.reference(), ["headroom"], step_times=steps) == []
    [five] = check(TimeoutPolicy.reference(), ["headroom"], step_times=steps, headroom=5.0)
    assert five == (
        "headroom: timeout_s(CPU, 64) = 1240.0 s is only 4.13 x the measured step of "
        "300.000 s at batch 64; needs >= 5 x (1500.0 s)"
    )
    [stock] = check(TimeoutPolicy.vllm_stock(environ={}), ["headroom"], step_times=steps)
    assert stock == (
        "headroom: timeout_s(CPU, 64) = 300.0 s is only 1.00 x the measured step of "
        "300.000 s at batch 64; needs >= 3 x (900.0 s)"
    )


def test_headroom_without_step_times_is_reported() -> None:
    """No measurements: headroom cannot pass silently."""
    [problem] = check(TimeoutPolicy.reference(), ["headroom"])
    assert problem.startswith("headroom: no measured step times")


def test_a_raising_policy_is_reported_not_raised() -> None:
    """A user's policy that raises becomes one line per check, naming the call and the error."""
    assert check(Raising(), ["cpu_gt_gpu", "capped"]) == [
        "cpu_gt_gpu: timeout_s(CPU, 1) raised RuntimeError: no rule for this backend",
        "capped: timeout_s(CPU, 1048576) raised RuntimeError: no rule for this backend",
    ]


def test_unknown_invariant_name() -> None:
    """An unknown name is a ValueError naming it and listing the valid ones."""
    with pytest.raises(ValueError, match=f"unknown invariant 'fast'; valid: {VALID}"):
        check(TimeoutPolicy.reference(), ["capped", "fast"])
    assert ", ".join(NAMES) == VALID


def test_batch_grid_adds_configured_sizes() -> None:
    """Checks cover the configured batch sizes beside the standard spread, sorted."""
    grid = batch_grid((3, 64, 100_000))
    assert list(grid) == sorted(grid) and len(set(grid)) == len(grid)
    assert {3, 64, 100_000} <= set(grid) and set(STANDARD_BATCH_SIZES) <= set(grid)
    # a configured size is where a problem can show first
    [problem] = check(Linear(), ["capped"], batch_sizes=(3,), cap_s=302.5)
    assert problem == "capped: timeout_s(CPU, 3) = 303.0 s is above the cap of 302.5 s"
