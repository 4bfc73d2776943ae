"""The progress record a rank publishes for the other nodes: written whole, read back checked."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_enginedead.contract import progress
from pytest_enginedead.contract.progress import RankProgress


def record(**changes: object) -> RankProgress:
    base = RankProgress(node=1, rank=1, pid=9, title="VLLM::Worker_TP1", host="h", seq=3, wall=100.0,
                        mono=50.0, cpu_s=12.5, cores=1.0, window_s=1.0, step=5, batch=64, running=True,
                        ran_s=2.0, steps=4)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_record_goes_through_its_file_unchanged(tmp_path: Path) -> None:
    rec = record()
    progress.write_progress(str(tmp_path), rec)
    assert (tmp_path / "progress-n1-r1.json").exists()
    assert progress.read_progress(str(tmp_path / "progress-n1-r1.json")) == rec
    assert [p.name for p in tmp_path.iterdir()] == ["progress-n1-r1.json"]  # no temporary left


@pytest.mark.parametrize(
    "bad",
    [{"node": "1"}, {"running": 1}, {"cores": True}, {"title": 5}, {"seq": None}],
    ids=["node-text", "running-int", "cores-bool", "title-int", "seq-none"],
)
def test_a_record_with_a_field_of_the_wrong_kind_is_none(tmp_path: Path, bad: dict[str, object]) -> None:
    data = {**json.loads(record().to_json()), **bad}
    path = tmp_path / "progress-n1-r1.json"
    path.write_text(json.dumps(data))
    assert progress.read_progress(str(path)) is None
    with pytest.raises(ValueError, match=next(iter(bad))):
        RankProgress.from_dict(data)


def test_a_record_lacking_an_optional_field_takes_its_default_and_lacking_a_required_one_is_refused() -> None:
    data = json.loads(record().to_json())
    del data["ended"]
    assert RankProgress.from_dict(data).ended is False
    del data["cpu_s"]
    with pytest.raises(ValueError, match="cpu_s"):
        RankProgress.from_dict(data)
    with pytest.raises(ValueError, match="not a progress record"):
        RankProgress.from_dict([1, 2])


def test_every_ranks_latest_record_is_read_by_node_and_rank_and_nothing_else(tmp_path: Path) -> None:
    progress.write_progress(str(tmp_path), record(node=2, rank=3))
    progress.write_progress(str(tmp_path), record(node=1, rank=1))
    progress.write_progress(str(tmp_path), record(node=0, rank=0))
    (tmp_path / "progress-n1-r1.json.77.tmp").write_text("{half")  # being written
    (tmp_path / "progress-n4-r4.json").write_text("{torn")
    (tmp_path / "control.json").write_text("{}")
    assert [r.key for r in progress.read_all(str(tmp_path))] == [(0, 0), (1, 1), (2, 3)]


def test_labels_name_the_node_and_the_ranks_of_the_title() -> None:
    assert record().label() == "node 1 TP1"
    assert record(title="VLLM::Worker_PP1_TP0").label() == "node 1 PP1 TP0"
    assert record(title="VLLM::Worker", rank=3).label() == "node 1 rank 3"


def test_a_stack_is_answered_under_the_token_of_its_request(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert progress.read_request(d, 1, 1) is None
    token = progress.request_stack(d, 1, 1)
    assert progress.read_request(d, 1, 1) == token
    assert progress.read_stack_answer(d, 1, 1, token) is None  # not answered yet
    progress.write_stack_answer(d, 1, 1, "an-older-token", "old stack")
    assert progress.read_stack_answer(d, 1, 1, token) is None  # an answer to another request
    progress.write_stack_answer(d, 1, 1, token, "main-thread 0x1\nThread 0x1:\n")
    assert progress.read_stack_answer(d, 1, 1, token) == "main-thread 0x1\nThread 0x1:\n"
    assert progress.request_stack(d, 1, 1) != token  # each request its own token


def test_silence_is_four_publishing_intervals() -> None:
    assert progress.SILENT_AFTER_S == 4 * progress.PUBLISH_EVERY_S
    assert progress.REQUEST_EVERY_S < progress.PUBLISH_EVERY_S
