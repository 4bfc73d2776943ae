"""pytest wiring for pytest-enginedead (``-p enginedead``): each hook hands over to its room.

``face.session`` (settings, outputs, header, the end of the run), ``face.collection`` (what
each test needs, the plan, the order, the shard), ``face.judging`` (the policy's invariants,
the report's rows), ``face.fixtures`` (engines, servers, factories), ``face.summary``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from .face import collection, hooks, judging, options, summary
from .face import session as lifecycle
from .face.fixtures import (
    engine_batch_size,
    enginedead_policy,
    vllm_engine,
    vllm_engine_factory,
    vllm_server,
    vllm_server_factory,
)
from .face.run import run_key

#: the fixtures this plugin provides (pytest finds them as this module's attributes)
__all__ = ["engine_batch_size", "enginedead_policy", "vllm_engine", "vllm_engine_factory", "vllm_server",
           "vllm_server_factory"]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.addoptions(parser)


def pytest_configure(config: pytest.Config) -> None:
    lifecycle.configure_run(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    lifecycle.unconfigure_run(config)


def pytest_report_header(config: pytest.Config) -> str:
    return lifecycle.header(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    collection.parametrize_batch_sizes(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    collection.plan_collection(config, items)


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    return collection.shard_line(config)


def pytest_runtest_setup(item: pytest.Item) -> None:
    collection.refuse_unplanned(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from judging.judge_invariants(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    return (yield from judging.observe_report(item, call))


def pytest_sessionfinish(session: pytest.Session) -> None:
    lifecycle.finish_session(session)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    run = config.stash.get(run_key, None)
    if run is not None:
        summary.terminal_summary(terminalreporter, run.results, run.settings.policy_name)
