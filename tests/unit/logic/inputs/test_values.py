"""Values as users give them, parsed and checked: batch sizes, fractions of a core, seconds."""

from __future__ import annotations

import re

import pytest

from pytest_enginedead.logic.inputs.values import (
    BadValue,
    Shard,
    parse_batch_sizes,
    parse_fraction,
    parse_seconds,
    parse_shard,
)

# --- the parsers ------------------------------------------------------------------------


def test_parse_batch_sizes() -> None:
    """Blanks are ignored, duplicates dropped, order kept."""
    assert parse_batch_sizes(" 64 , 8,64 ") == (64, 8)
    assert parse_batch_sizes("1") == (1,)
    for bad in ("", "8,", "1.5", "8;64", "0"):
        with pytest.raises(BadValue):
            parse_batch_sizes(bad)


def test_parse_fraction_and_seconds() -> None:
    """A share of a core as 0.05 or 5 %; seconds in (0, 60]."""
    assert parse_fraction("0.05") == parse_fraction("5%") == pytest.approx(0.05)
    assert parse_fraction("150%") == pytest.approx(1.5)
    assert parse_seconds(" 0.1 ") == 0.1
    for bad in ("", "5 %%", "nan%", "65"):
        with pytest.raises(BadValue):
            parse_fraction(bad)
    for bad in ("-1", "61", "inf"):
        with pytest.raises(BadValue):
            parse_seconds(bad)


@pytest.mark.parametrize("raw", ["1e-9", "0.0009", "0", "60.5", "nan"])
def test_the_sample_interval_has_a_floor_and_a_ceiling(raw: str) -> None:
    """At least 1 ms (a shorter one spins the sampler on a core) and at most 60 s, both in the
    message and in the option's help."""
    from pytest_enginedead.logic.inputs.optiontable import OPTIONS

    with pytest.raises(BadValue) as info:
        parse_seconds(raw)
    assert str(info.value) == (f"{raw!r} must be at least 0.001 (1 ms: shorter spins a core sampling) and at "
                               "most 60 seconds")
    assert parse_seconds("0.001") == 0.001 and parse_seconds("60") == 60
    (option,) = [o for o in OPTIONS if o.name == "enginedead_sample_interval"]
    assert "at least 0.001, at most 60" in option.help


def test_parse_shard() -> None:
    assert parse_shard("1/2") == Shard(1, 2) and str(parse_shard(" 3 / 3 ")) == "3/3"
    for bad, why in [("1-2", "is not K/N"), ("0/2", "no shard 0 of 2"), ("3/2", "no shard 3 of 2"),
                     ("1/0", "from 1 to 1000"), ("1/1001", "from 1 to 1000"), ("", "is not K/N"),
                     ("1.5/2", "is not K/N"), ("-1/2", "is not K/N")]:
        with pytest.raises(BadValue, match=re.escape(why)):
            parse_shard(bad)
