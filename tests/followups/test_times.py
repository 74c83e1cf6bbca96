"""Follow-up times (memory/followups/times.py): local times read in the user's zone,
across a DST change; quiet windows that wrap midnight; snoozes landing at 09:00 local."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory.followups.times import TimeError, after_quiet, due_utc, quiet_window, snoozed, zone

NOW = datetime(2030, 3, 1, tzinfo=UTC)


def test_due_times_are_local_to_the_zone_unless_they_carry_an_offset() -> None:
    assert due_utc("2030-05-06T09:00", "Asia/Tokyo", NOW) == datetime(2030, 5, 6, 0, tzinfo=UTC)
    assert due_utc("2030-05-06", "Asia/Tokyo", NOW) == datetime(2030, 5, 6, 0, tzinfo=UTC)
    assert due_utc("2030-05-06T09:00+02:00", "Asia/Tokyo", NOW) == datetime(
        2030, 5, 6, 7, tzinfo=UTC
    )
    # Berlin: UTC+1 before the last Sunday of March, UTC+2 after.
    assert due_utc("2030-03-30T09:00", "Europe/Berlin", NOW).hour == 8
    assert due_utc("2030-04-01T09:00", "Europe/Berlin", NOW).hour == 7
    assert due_utc("2030-04-01T09:00", None, NOW).hour == 9  # no zone: UTC
    for bad, why in (("tomorrow", "date and time"), ("2029-01-01T09:00", "in the past")):
        with pytest.raises(TimeError, match=why):
            due_utc(bad, "UTC", NOW)


def test_zones_are_checked() -> None:
    assert str(zone("America/Argentina/Buenos_Aires")) == "America/Argentina/Buenos_Aires"
    for bad in ("Mars/Olympus", "../../etc/passwd", "Europe/Berlin; rm", "x" * 80):
        with pytest.raises(TimeError):
            zone(bad)


def test_quiet_hours_wrap_midnight_and_end_in_local_time() -> None:
    tokyo = "Asia/Tokyo"
    at_23 = datetime(2030, 5, 6, 14, tzinfo=UTC)  # 23:00 in Tokyo
    assert after_quiet(at_23, tokyo, "22:00-08:00") == datetime(2030, 5, 6, 23, tzinfo=UTC)
    at_03 = datetime(2030, 5, 6, 18, tzinfo=UTC)  # 03:00 the next day in Tokyo
    assert after_quiet(at_03, tokyo, "22:00-08:00") == datetime(2030, 5, 6, 23, tzinfo=UTC)
    noon = datetime(2030, 5, 6, 3, tzinfo=UTC)
    assert after_quiet(noon, tokyo, "22:00-08:00") == noon
    assert after_quiet(noon, tokyo, "11:00-13:00") == datetime(2030, 5, 6, 4, tzinfo=UTC)
    assert after_quiet(at_23, tokyo, "00:00-00:00") == at_23  # equal: no quiet hours
    with pytest.raises(TimeError):
        quiet_window("22-8")


def test_snoozes() -> None:
    pressed = datetime(2030, 5, 6, 20, 30, tzinfo=UTC)  # 05:30 on 7 May in Tokyo
    assert snoozed("1h", "Asia/Tokyo", pressed) == datetime(2030, 5, 6, 21, 30, tzinfo=UTC)
    assert snoozed("tomorrow", "Asia/Tokyo", pressed) == datetime(2030, 5, 8, 0, tzinfo=UTC)
    assert snoozed("week", "Asia/Tokyo", pressed) == datetime(2030, 5, 14, 0, tzinfo=UTC)
    with pytest.raises(TimeError):
        snoozed("forever", "UTC", pressed)
