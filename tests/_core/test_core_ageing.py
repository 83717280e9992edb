"""The pure ageing rules: stamps, ages, and what replay does with an expired entry."""

from __future__ import annotations

import pytest

from dejacache import ConfigurationError
from dejacache._core.ageing import (
    age_text,
    check_on_expiry,
    on_expired,
    recorded_at,
    span,
    stamp,
)

DAY = 86400.0
NOW = 1767323045.0  # 2026-01-02T03:04:05Z
SKEW = 300.0  # the clock skew allowed before a date is in the future (CLOCK_SKEW, documented)


def test_stamp_is_iso_utc_and_reads_back() -> None:
    assert stamp(NOW + 0.7) == "2026-01-02T03:04:05Z"
    assert recorded_at({"recorded_at": stamp(NOW)}) == NOW


@pytest.mark.parametrize(("born", "max_age", "mode", "on_expiry", "expected"), [
    (NOW - 31 * DAY, 30 * DAY, "auto", "warn", "warn"),
    (NOW - 31 * DAY, 30 * DAY, "auto", "rerecord", "rerecord"),
    (NOW - 31 * DAY, 30 * DAY, "replay", "rerecord", "warn"),  # replay never goes live
    (NOW - 31 * DAY, 30 * DAY, "record", "rerecord", "warn"),
    (NOW - 29 * DAY, 30 * DAY, "auto", "rerecord", None),  # fresh
    (NOW - 31 * DAY, None, "auto", "rerecord", None),  # no max_age
    (None, 30 * DAY, "auto", "rerecord", None),  # age unknown: never expired
    # dated in the future (a wrong clock, a hand edit): never fresh for ever
    (NOW + 400 * DAY, 30 * DAY, "auto", "rerecord", "rerecord"),
    (NOW + 400 * DAY, 30 * DAY, "auto", "warn", "warn"),
    (NOW + 400 * DAY, 30 * DAY, "replay", "rerecord", "warn"),
    (NOW + SKEW + 1, 30 * DAY, "auto", "rerecord", "rerecord"),
    (NOW + SKEW, 30 * DAY, "auto", "rerecord", None),  # within the skew allowed
    (NOW + 400 * DAY, None, "auto", "rerecord", None),  # no max_age: nothing expires
])
def test_on_expired_table(born: float | None, max_age: float | None, mode: str,
                          on_expiry: str, expected: str | None) -> None:
    assert on_expired(born, max_age, NOW, mode=mode, on_expiry=on_expiry) == expected


def test_ages_and_spans_read_as_people_write_them() -> None:
    assert age_text(NOW - 45 * DAY - 5, NOW) == "45d"
    assert age_text(NOW - 3 * 3600, NOW) == "3h"
    assert age_text(NOW - 5, NOW) == "5s"
    assert age_text(None, NOW) == "unknown"
    assert span(30 * DAY) == "30d" and span(90) == "90s"


def test_on_expiry_is_checked_where_it_is_written() -> None:
    assert check_on_expiry(" ReRecord ") == "rerecord"
    with pytest.raises(ConfigurationError, match="unknown on_expiry 'later'"):
        check_on_expiry("later")


def test_a_date_in_the_future_is_past_any_max_age() -> None:
    from dejacache._core.ageing import CLOCK_SKEW, expired, in_future

    assert CLOCK_SKEW == SKEW
    assert in_future(NOW + 301, NOW) and not in_future(NOW + 299, NOW)
    assert not in_future(None, NOW)
    assert expired(NOW + 400 * DAY, 10_000 * DAY, NOW)
    assert not expired(NOW + 60, 30 * DAY, NOW)  # a clock a minute apart is not a bad date
    assert expired(NOW - 31 * DAY, 30 * DAY, NOW) and not expired(NOW - 29 * DAY, 30 * DAY, NOW)
    assert not expired(None, 30 * DAY, NOW) and not expired(NOW + 400 * DAY, None, NOW)
    assert age_text(NOW + 400 * DAY, NOW) == "400d"  # how far ahead, not "0s"
