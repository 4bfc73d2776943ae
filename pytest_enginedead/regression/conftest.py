"""Parametrize the regression suite: each batch size under the stock deadline and the policy."""

from __future__ import annotations

import os

import pytest

from pytest_enginedead.checking import CheckPlan
from pytest_enginedead.plugin import settings_of


@pytest.fixture(scope="session")
def check_plan(pytestconfig: pytest.Config) -> CheckPlan:
    s = settings_of(pytestconfig)
    return CheckPlan.from_env(os.environ, s.model, s.batch_sizes)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "check_mode" not in metafunc.fixturenames:
        return
    s = settings_of(metafunc.config)
    plan = CheckPlan.from_env(os.environ, s.model, s.batch_sizes)
    inject = [pytest.mark.enginedead_inject(slow_s_per_seq=plan.slow_s_per_seq)] if plan.slow_s_per_seq else []
    metafunc.parametrize(
        "check_mode",
        [
            pytest.param("stock", marks=[pytest.mark.enginedead_timeout(plan.stock_s), *inject]),
            pytest.param("policy", marks=inject),
        ],
    )
