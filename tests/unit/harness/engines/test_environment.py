"""The environment an engine's processes start with: its KV cache, and the guard variables the
harness passes to (or keeps from) every engine it starts."""

from __future__ import annotations

import pytest

from pytest_enginedead.compat import llm_config, versions
from pytest_enginedead.harness.engines.base import EngineBase
from pytest_enginedead.harness.engines.environment import cleared_variables, process_environment
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from pytest_enginedead.logic.planning.engines import DeadlineAndFaults, EngineSpec, GuardSpec


def _kv_cache(spec_kwargs: dict[str, object], version: str | None = "0.32.0",
              monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[dict[str, str], dict[str, int]]:
    from pytest_enginedead.harness.engines.environment import kv_cache
    from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
    from pytest_enginedead.logic.planning.engines import EngineSpec

    assert monkeypatch is not None
    monkeypatch.setattr(versions, "installed_version", lambda: version)
    spec_kwargs = {"model": BUNDLED_MODEL, "max_num_seqs": 64, **spec_kwargs}
    return kv_cache(EngineSpec(**spec_kwargs))  # type: ignore[arg-type]


def test_the_kv_cache_is_what_the_engines_sequences_can_fill(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine allocates its KV cache at start (1 GiB: ~3 s of a 2-core box's start): the
    harness asks for what max_num_seqs sequences at max_model_len fill, x1.5, at most 1 GiB;
    whatever the user, the spec or an old vLLM says wins."""
    from pytest_enginedead.logic.sizing import slices

    monkeypatch.delenv(llm_config.KV_CACHE_ENV, raising=False)
    mib = 1024**2
    # the bundled model: 2 layers x 4 kv heads x 64 x (k, v) x bf16 = 2 KiB a token
    assert _kv_cache({}, monkeypatch=monkeypatch) == ({}, {llm_config.KV_CACHE_ARG: 64 * 512 * 2048 * 3 // 2})
    assert _kv_cache({"max_num_seqs": 8, "extra_args": (("max_model_len", 256),)},
                     monkeypatch=monkeypatch)[1] == {llm_config.KV_CACHE_ARG: 6 * mib}
    assert _kv_cache({"max_num_seqs": 4096},
                     monkeypatch=monkeypatch)[1] == {llm_config.KV_CACHE_ARG: slices.GIB}
    # given: the spec's GiB, the user's variable, the user's engine argument
    assert _kv_cache({"kv_cache_gib": 3}, monkeypatch=monkeypatch) == ({llm_config.KV_CACHE_ENV: "3"}, {})
    assert _kv_cache({"extra_args": ((llm_config.KV_CACHE_ARG, 1 << 28),)},
                     monkeypatch=monkeypatch) == ({}, {})
    monkeypatch.setenv(llm_config.KV_CACHE_ENV, "2")
    assert _kv_cache({}, monkeypatch=monkeypatch) == ({}, {})
    monkeypatch.delenv(llm_config.KV_CACHE_ENV)
    # a vLLM before the CPU platform took bytes, or a model it cannot be sized for: 1 GiB
    assert _kv_cache({}, version="0.20.0", monkeypatch=monkeypatch) == ({llm_config.KV_CACHE_ENV: "1"}, {})
    assert _kv_cache({"model": "/nonexistent"},
                     monkeypatch=monkeypatch) == ({llm_config.KV_CACHE_ENV: "1"}, {})


# --- what reaches an engine --------------------------------------------------------------------

SHELL = {"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_POLICY": "mine:cap", "ENGINEDEAD_GUARD_HANG_S": "soon",
         "ENGINEDEAD_GUARD_PATH": "/opt/policies", "PATH": "/usr/bin"}


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
def test_the_guard_a_shell_exports_never_reaches_an_engine(guarded: bool) -> None:
    """An operator's production ``ENGINEDEAD_GUARD*``: an engine not asked to be guarded gets
    ``ENGINEDEAD_GUARD=0`` and none of the others; a guarded one gets the harness's values."""
    spec = EngineSpec(BUNDLED_MODEL, 8, guard=GuardSpec(3.0, "edcap:cap") if guarded else None)
    engine = EngineBase(spec)
    try:
        env = process_environment(engine.environment(DeadlineAndFaults(2.0)), spec, SHELL)
    finally:
        engine.stop()
    assert env["PATH"] == "/usr/bin"
    guard_env = {k: v for k, v in env.items() if k.startswith("ENGINEDEAD_GUARD")}
    if not guarded:
        assert guard_env == {"ENGINEDEAD_GUARD": "0"}
        assert cleared_variables(spec) == ["ENGINEDEAD_GUARD_POLICY", "ENGINEDEAD_GUARD_HANG_S",
                                              "ENGINEDEAD_GUARD_PATH"]
        return
    assert guard_env["ENGINEDEAD_GUARD"] == "1"
    assert guard_env["ENGINEDEAD_GUARD_POLICY"] == "edcap:cap"
    assert guard_env["ENGINEDEAD_GUARD_HANG_S"] == "3.0"
    assert "/opt/policies" not in guard_env["ENGINEDEAD_GUARD_PATH"]
