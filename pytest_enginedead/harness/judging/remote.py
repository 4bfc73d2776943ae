"""The verdict's remote half: an engine's ranks on other nodes, judged from their published progress.

``verdict.judge_death`` reads the head's own ranks from ``/proc``; the other nodes' ranks
come from here (``process.remote``): computing, idle, or gone after ``SILENT_AFTER_S`` of
silence (``DEAD``, never ``SLOW``).  Their evidence lines, their report entries, and the
stack of a remote rank that computed when vLLM gave up (asked for through the progress
directory) are made here.
"""

from __future__ import annotations

from typing import Any

from ...contract.decisions import Verdict
from ...logic.reporting.deaths import RemoteRank, StepRef
from ...logic.reporting.where import Where
from ...process.remote import RemoteLook
from . import slowpaths, stacks


def remote_looks(engine: Any) -> list[RemoteLook]:
    """The other nodes' ranks of ``engine`` once each has spoken since now, or gone silent
    (none on one node, or for an engine without such evidence)."""
    evidence = getattr(engine, "evidence", None)
    if evidence is None or not getattr(evidence, "has_remote", False):
        return []
    looks: list[RemoteLook] = evidence.remote_ranks(fresh=True)
    return looks


def computing(looks: list[RemoteLook]) -> list[RemoteLook]:
    return [lk for lk in looks if lk.verdict is Verdict.SLOW]


def remote_where(engine: Any, look: RemoteLook) -> tuple[str | None, Where | None, list[str]]:
    """A computing remote rank's stack, where it was and its slow paths: asked for now (its own
    dump at the deadline stays on its node)."""
    text = engine.evidence.remote_stack(look.record.node, look.record.rank)
    if text is None:
        return None, None, []
    how = f"a stack {look.label} sent when asked, after the death (through the progress directory)"
    return text, stacks.where(text, how), slowpaths.in_stacks(text)


def remote_lines(looks: list[RemoteLook]) -> list[str]:
    """The evidence lines of the remote ranks, as the local processes' read."""
    lines = []
    for look in looks:
        lines.append(f"  process:    {look.describe()}")
        lines.append(f"  rank:       {look.label}: {look.state}")
        if look.record.running and not look.gone:
            lines.append(f"  step:       {look.step_words()} (by its own clock)")
    return lines


def remote_records(looks: list[RemoteLook]) -> tuple[RemoteRank, ...]:
    """The remote ranks as a death's record keeps them."""
    return tuple(
        RemoteRank(
            lk.record.node, lk.record.rank, lk.record.pid, lk.record.title, lk.record.host, lk.verdict,
            lk.state, lk.record.cores, lk.record.window_s, lk.silent_s,
            StepRef(lk.record.step, lk.record.batch, lk.record.running) if lk.record.step else None,
            lk.judgement.reason,
        )
        for lk in looks
    )
