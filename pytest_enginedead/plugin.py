"""pytest wiring for pytest-enginedead (``-p enginedead``): each hook hands over to its module.

``pytest_plugin.session`` (settings, outputs, header, the end of the run), ``pytest_plugin.collection`` (what
each test needs, the plan, the order, the shard), ``pytest_plugin.aroundcall`` (the policy's invariants,
the report's rows), ``pytest_plugin.fixtures`` (engines, servers, factories), ``pytest_plugin.summary``.

Installed, the plugin loads in every pytest run of its environment (pytest's ``pytest11``
entry point), most of which have no engine test: a module is imported when a test of the
plugin's needs it, so such a run costs no more than its options and says nothing.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from .pytest_plugin import hooks, options
from .pytest_plugin import session as lifecycle
from .pytest_plugin.fixturedefs import (
    engine_batch_size,
    enginedead_policy,
    vllm_engine,
    vllm_engine_factory,
    vllm_server,
    vllm_server_factory,
)
from .pytest_plugin.run import plan_key, run_key, run_of, uses_plugin

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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_batch_size" in metafunc.fixturenames:
        from .pytest_plugin import collection

        collection.parametrize_batch_sizes(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = run_of(config)
    light = (run.settings.shard is None and not hasattr(config, "workerinput")
             and not any(uses_plugin(item) for item in items))
    if light:  # nothing to plan: no test of the plugin's, no shard to keep, no xdist controller to tell
        with options.shown_whole_if_verbose(config):
            options.check_late_policy_hooks(config, run.settings)
        return
    from .pytest_plugin import collection

    collection.plan_collection(config, items)


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    return lifecycle.collection_lines(config)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if plan_key in item.stash:
        from .pytest_plugin import collection

        collection.refuse_unplanned(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    if item.get_closest_marker("enginedead_invariants") is None:
        return (yield)
    from .pytest_plugin import aroundcall as judging

    return (yield from judging.judge_invariants(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    run = item.config.stash.get(run_key, None)
    if run is None or not (run.plugin_tests or uses_plugin(item)):
        return (yield)
    from .pytest_plugin import aroundcall as judging

    return (yield from judging.observe_report(item, call))


def pytest_sessionfinish(session: pytest.Session) -> None:
    lifecycle.finish_session(session)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    run = config.stash.get(run_key, None)
    if run is not None and run.has_results and run.results.engines:
        from .pytest_plugin import summary

        summary.terminal_summary(terminalreporter, run.results, run.settings.policy_name)
