"""Durations: numbers, timedeltas and text such as ``"1h30m"``, checked where they are given."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dejacache._core.durations import MAX_SECONDS, seconds
from dejacache.errors import ConfigurationError


@pytest.mark.parametrize(("value", "expected"), [
    (90, 90.0), (1.5, 1.5), (datetime.timedelta(minutes=5), 300.0),
    ("90s", 90.0), ("5m", 300.0), ("1h", 3600.0), ("2d", 172800.0), ("250ms", 0.25),
    ("1h30m", 5400.0), ("1h 30m", 5400.0), (" 1H30M ", 5400.0), ("1.5h", 5400.0),
    ("1d2h3m4s5ms", 93784.005), (".5s", 0.5), ("36524d", 36524 * 86400.0),
])
def test_accepted(value: Any, expected: float) -> None:
    assert seconds(value, "ttl") == pytest.approx(expected)


@pytest.mark.parametrize("value", [
    "", " ", "h", "90", "1 hour", "1x", "-5m", "+5m", "30m1h", "1h1h", "1h 30", "5 m s",
    "1e3s", "1,5h", None, True, False, [60], {"s": 1}, b"5s",
])
def test_not_a_duration(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="tool_cache ttl must be a duration") as info:
        seconds(value, "tool_cache ttl")
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("value", [0, 0.0, "0s", -1, float("nan"), float("inf"),
                                   float("-inf"), datetime.timedelta(0),
                                   datetime.timedelta(seconds=-1), MAX_SECONDS * 2, "36600d"])
def test_out_of_range(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"ttl must be more than 0 .*\(None: no "
                                                 r"expiry\)") as info:
        seconds(value, "ttl", hint="None: no expiry")
    assert repr(value) in str(info.value)


def test_zero_when_allowed() -> None:
    assert seconds(0, "counter_max_age", zero=True) == 0.0
    assert seconds("0s", "counter_max_age", zero=True) == 0.0
    with pytest.raises(ConfigurationError, match="0 or more"):
        seconds(-0.5, "counter_max_age", zero=True)


_PARTS = st.fixed_dictionaries({}, optional={u: st.integers(0, 999) for u in
                                             ("d", "h", "m", "s", "ms")})


@given(_PARTS.filter(bool), st.booleans())
def test_text_adds_its_parts_in_order(parts: dict[str, int], spaced: bool) -> None:
    """Any parts written largest first are their sum (within the 100-year bound)."""
    unit = {"d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
    order = [u for u in ("d", "h", "m", "s", "ms") if u in parts]
    text = (" " if spaced else "").join(f"{parts[u]}{u}" for u in order)
    total = sum(parts[u] * unit[u] for u in order)
    if total == 0:
        with pytest.raises(ConfigurationError):
            seconds(text, "ttl")
    else:
        assert seconds(text, "ttl") == pytest.approx(total)
        if len(order) > 1:  # the same parts out of order are refused, never summed
            with pytest.raises(ConfigurationError):
                seconds("".join(f"{parts[u]}{u}" for u in reversed(order)), "ttl")


def test_other_real_numbers_are_seconds_and_decimals_are_not() -> None:
    """Ints and floats take the short branch; any other ``numbers.Real`` (imported only
    then) is still seconds, and a ``Decimal`` (not registered as Real) is still refused."""
    import decimal
    import fractions

    assert seconds(fractions.Fraction(3, 2), "ttl") == 1.5
    with pytest.raises(ConfigurationError, match="ttl must be a duration"):
        seconds(decimal.Decimal("1.5"), "ttl")
