"""The plugin's fixtures as pytest finds them: light declarations that import the engine
machinery (``pytest_plugin.fixtures``) only when a test asks for an engine.  A run whose tests use none
of them pays for none of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from .run import run_of

if TYPE_CHECKING:
    from ..logic.timeouts.policies import PolicyLike
    from .handles import EngineHandle, ServerHandle


@pytest.fixture
def enginedead_policy(pytestconfig: pytest.Config) -> PolicyLike:
    """The active timeout policy (``--enginedead-policy``, the hook, or the reference)."""
    return run_of(pytestconfig).settings.policy


@pytest.fixture
def engine_batch_size(pytestconfig: pytest.Config) -> int:
    """The batch size this test's engine runs at (parametrized over the batch sizes)."""
    return run_of(pytestconfig).settings.batch_sizes[0]


@pytest.fixture
def vllm_engine(request: pytest.FixtureRequest, engine_batch_size: int) -> Iterator[EngineHandle]:
    """A real vLLM CPU engine at ``engine_batch_size``, shared with tests of the same config."""
    from . import fixtures

    yield from fixtures.engine(request, engine_batch_size)


@pytest.fixture
def vllm_server(request: pytest.FixtureRequest, engine_batch_size: int) -> Iterator[ServerHandle]:
    """vLLM's OpenAI-compatible API server at ``engine_batch_size`` (``--max-num-seqs``), shared."""
    from . import fixtures

    yield from fixtures.server(request, engine_batch_size)


@pytest.fixture
def vllm_engine_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., EngineHandle]]:
    """Start engines with explicit arguments; every engine it made is stopped afterwards.

    ``vllm_engine_factory(batch_size, timeout_s=None, inject=None, model=None, **engine_args)``
    """
    from . import fixtures

    yield from fixtures.engine_factory(request)


@pytest.fixture
def vllm_server_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., ServerHandle]]:
    """Start API servers with explicit arguments; every server it made is stopped afterwards.

    ``vllm_server_factory(batch_size, timeout_s=None, inject=None, model=None, **server_args)``
    (server arguments become ``--flags``).
    """
    from . import fixtures

    yield from fixtures.server_factory(request)
