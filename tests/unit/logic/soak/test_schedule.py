"""The soak's fault schedule: the shipped ones load; a bad one is one line naming the entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_enginedead.logic.soak.schedule import KINDS, ScheduleError, load, parse

ROOT = Path(__file__).resolve().parents[4]
SHIPPED = sorted((ROOT / "bench" / "schedules").glob("*.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_the_shipped_schedules_load(path: Path) -> None:
    schedule = load(str(path))
    assert schedule.faults
    assert {f.kind for f in schedule.faults} <= set(KINDS)


def test_the_default_schedule_has_every_kind_of_fault_and_the_tp2_one_a_slow_a_hung_and_a_spinning_rank(
) -> None:
    default = load(str(ROOT / "bench" / "schedules" / "default.toml"))
    assert {f.kind for f in default.faults} == set(KINDS)
    tp2 = load(str(ROOT / "bench" / "schedules" / "tp2.toml"))
    assert tp2.tensor_parallel_size == 2
    ranked = {(f.kind, f.ranks) for f in tp2.faults if f.ranks}
    assert ranked == {("slow", (1,)), ("hang", (1,)), ("spin", (1,))}


def test_json_and_toml_say_the_same() -> None:
    toml = parse('deadline_s = 3\n[[faults]]\nkind = "hang"\nafter_s = 4\n', "s.toml")
    js = parse(json.dumps({"deadline_s": 3, "faults": [{"kind": "hang", "after_s": 4}]}), "s.json")
    assert toml.faults[0].kind == js.faults[0].kind == "hang"
    assert toml.faults[0].after_s == js.faults[0].after_s == 4.0
    assert toml.deadline_s == js.deadline_s == 3
    assert js.faults[0].fatal and js.hang_s == 5.0  # the defaults


BAD = {
    "unknown-kind": ({"faults": [{"kind": "slow"}, {"kind": "hungg"}]},
                     "schedule s.json: faults[1]: kind 'hungg' is not one of slow, hang, spin, kill"),
    "unknown-key": ({"faults": [{"kind": "hang", "step": 2}]},
                    "schedule s.json: faults[0] (kind 'hang'): unknown key 'step'; "
                    "a hang fault takes after_s, ranks"),
    "negative-after": ({"faults": [{"kind": "burst", "after_s": -1}]},
                       "faults[0] (kind 'burst'): after_s=-1 must be a number of seconds >= 0"),
    "factor-below-one": ({"faults": [{"kind": "burst", "factor": 0.5}]},
                         "faults[0] (kind 'burst'): factor=0.5 must be a factor above 1"),
    "no-such-rank": ({"faults": [{"kind": "slow", "ranks": [1]}]},
                     "faults[0] (kind 'slow'): rank 1 does not exist at tensor_parallel_size 1"),
    "ranks-not-a-list": ({"tensor_parallel_size": 2, "faults": [{"kind": "hang", "ranks": 1}]},
                         "ranks=1 must be a list of rank numbers"),
    "steps-zero": ({"faults": [{"kind": "slow", "steps": 0}]}, "steps=0 must be a whole number >= 1"),
    "deadline-fraction": ({"deadline_s": 1.5, "faults": [{"kind": "hang"}]},
                          "schedule s.json: deadline_s=1.5 must be a whole number >= 1"),
    "unknown-setting": ({"deadline": 2, "faults": [{"kind": "hang"}]}, "unknown setting 'deadline'"),
    "no-faults": ({"deadline_s": 2}, "schedule s.json: no faults"),
    "context-too-long": ({"max_model_len": 32, "faults": [{"kind": "context_limit", "max_tokens": 40}]},
                         "max_tokens 40 leaves no prompt under max_model_len 32"),
    "repeat-text": ({"repeat": "yes", "faults": [{"kind": "hang"}]}, "repeat='yes' must be true or false"),
}


@pytest.mark.parametrize("data, words", BAD.values(), ids=BAD.keys())
def test_a_bad_schedule_is_one_line_naming_the_entry(data: dict[str, object], words: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse(json.dumps(data), "/some/where/s.json")
    message = str(info.value)
    assert words in message
    assert "\n" not in message


def test_a_file_that_does_not_parse_or_is_missing_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "s.toml"
    bad.write_text("[[faults]\nkind = 1\n")
    with pytest.raises(ScheduleError, match=r"^schedule s\.toml: not valid TOML \(.*\)$"):
        load(str(bad))
    with pytest.raises(ScheduleError, match=r"cannot read it"):
        load(str(tmp_path / "none.json"))
