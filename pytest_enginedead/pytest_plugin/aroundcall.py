"""Around each test's call: the policy's invariants judged, the report's rows observed.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from ..contract.steps import worst_by_batch
from ..logic.inputs.arguments import BadMarker
from ..logic.reporting.report import junit_properties
from ..logic.timeouts import invariants
from ..logic.words import plural
from . import markers
from .collection import uses_factory
from .run import Run, fail, handle_key, plan_key, run_of


def judge_invariants(item: pytest.Item) -> Generator[None, object, object]:
    marker = item.get_closest_marker("enginedead_invariants")
    if marker is None:
        return (yield)
    try:
        req = markers.invariant_request(marker)
    except BadMarker as exc:
        fail(str(exc))
    run = run_of(item.config)
    handle = item.stash.get(handle_key, None)
    # with an engine and no given step times, headroom is judged on the steps it ran
    measured = handle is not None and req.step_times is None and "headroom" in req.names
    judge_policy(run, [n for n in req.names if not (measured and n == "headroom")], req, req.step_times)
    result = yield
    if measured and handle is not None:
        judge_policy(run, ["headroom"], req, worst_by_batch(handle.step_times()))
    return result


def judge_policy(
    run: Run, names: list[str], req: markers.InvariantRequest, steps: dict[int, float] | Any
) -> None:
    if not names:
        return
    problems = invariants.violations(
        run.settings.policy, names, batch_sizes=run.settings.batch_sizes,
        cap_s=req.cap_s, headroom=req.headroom, step_times=steps,
    )
    if problems:
        pytest.fail(
            f"policy {run.settings.policy_name} breaks {plural(len(problems), 'invariant')}:\n"
            + "\n".join(f"  {p}" for p in problems),
            pytrace=False,
        )


def observe_report(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    handle = item.stash.get(handle_key, None)
    uses_engine = handle is not None or plan_key in item.stash or uses_factory(item)
    run_of(item.config).results.observe_time(uses_engine, rep.duration)
    if handle is not None:
        row = run_of(item.config).results.observe(item.nodeid, rep, handle)
        if row is not None and rep.when == "call":
            # junitxml reads properties from the teardown report, made after this
            item.user_properties.extend(junit_properties(row))
    return rep
