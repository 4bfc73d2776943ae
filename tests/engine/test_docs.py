"""The docs' examples that start an engine, run as their pages say (``tests/unit/test_docs.py``
runs the others, and skips these): each page's files in one directory, ``test_*.py`` under
``pytest -p enginedead``, every test passing (an expected failure says ``xfail(strict=True)``).
The pages' test files run in one pytest run (``docs.run_together``): the README, the tutorial
and the CI how-to all test the same decode batch, on one engine instead of one per page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import docs
from tests.support.downstream import Downstream

pytestmark = pytest.mark.engine

EXAMPLES = [(page, ex) for page, ex in docs.examples() if ex.needs_engine]


def test_there_are_engine_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.xdist_group("docs")  # one run for the pages' test files: docs.run_together
@pytest.mark.parametrize(("page", "example"), EXAMPLES, ids=[docs.example_id(p, e) for p, e in EXAMPLES])
def test_a_docs_example_with_an_engine_runs(downstream: Downstream, page: Path, example: Any) -> None:
    if example.file.startswith("test_"):
        tests = [(p, e.file) for p, e in EXAMPLES if e.file.startswith("test_")]
        docs.run_together(downstream, page, example.file, tests)
    else:
        docs.run_example(downstream, page, example.file)
