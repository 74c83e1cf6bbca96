"""Follow-up times: IANA zones (validated by zoneinfo), a due time the model or a person
gives read in the user's zone, quiet hours and snoozes in local time.

Decisions: a due time without an offset is local to the user's zone (UTC until they set
one with `/memory timezone`); "tomorrow" is 09:00 local the next day and "next week" is
09:00 local seven days on, so a snooze never lands in the night; quiet hours are a local
window "HH:MM-HH:MM" (it may wrap midnight) and a follow-up due in it waits for its end.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

DEFAULT_QUIET = "22:00-08:00"
MORNING = time(9, 0)
SNOOZES = {"1h": "1 h", "tomorrow": "tomorrow", "week": "next week"}
_QUIET = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")
_ZONE = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+){0,2}$")


class TimeError(ValueError):
    """A time, zone or window that cannot be used; the message says why, in one line."""


def zone(name: str | None) -> ZoneInfo:
    """The zone `name` (IANA, "Area/City"); UTC for None or empty. TimeError if unknown."""
    return _zone((name or "").strip())


@functools.lru_cache(maxsize=512)
def _zone(name: str) -> ZoneInfo:
    if not name:
        return ZoneInfo("UTC")
    if not _ZONE.match(name) or len(name) > 64:
        raise TimeError(f"{name[:64]!r} is not a time zone name (like Europe/Berlin)")
    try:
        found = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise TimeError(
            f"unknown time zone {name!r}; use an Area/City name like Europe/Berlin"
        ) from None
    if name not in _known() and name != "UTC":
        raise TimeError(f"unknown time zone {name!r}; use an Area/City name like Europe/Berlin")
    return found


@functools.cache
def _known() -> frozenset[str]:
    """The IANA names this system knows (read once: it scans the zone files)."""
    return frozenset(available_timezones())


def due_utc(text: str, tz: str | None, now: datetime) -> datetime:
    """`text` (ISO 8601: "2026-05-03T09:00", with or without an offset; a date alone is
    09:00) as UTC; a time without an offset is local to `tz`. TimeError if unreadable or
    not after `now`."""
    raw = text.strip()
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise TimeError(
            f"due must be a date and time like 2026-05-03T09:00, not {raw[:40]!r}"
        ) from None
    if len(raw) <= 10:  # a date alone
        when = datetime.combine(when.date(), MORNING)
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone(tz))
    when = when.astimezone(UTC)
    if when <= now:
        raise TimeError(f"due {raw[:40]} is in the past")
    return when


def quiet_window(text: str | None) -> tuple[time, time]:
    """The window "HH:MM-HH:MM" (DEFAULT_QUIET when empty); TimeError if malformed."""
    m = _QUIET.match((text or DEFAULT_QUIET).strip())
    if m is None:
        raise TimeError("quiet hours are HH:MM-HH:MM, like 22:00-08:00")
    a, b, c, d = (int(x) for x in m.groups())
    return time(a, b), time(c, d)


def after_quiet(at: datetime, tz: str | None, quiet: str | None) -> datetime:
    """`at` (UTC) if it is outside the quiet window in `tz`, else the window's end (UTC)."""
    start, end = quiet_window(quiet)
    if start == end:
        return at
    zi = zone(tz)
    local = at.astimezone(zi)
    t = local.time()
    inside = (start <= t < end) if start < end else (t >= start or t < end)
    if not inside:
        return at
    day = local.date() if t < end else local.date() + timedelta(days=1)
    return datetime.combine(day, end, tzinfo=zi).astimezone(UTC)


def snoozed(how: str, tz: str | None, now: datetime) -> datetime:
    """The new due time of a snooze `how` (a key of SNOOZES) pressed at `now`."""
    if how == "1h":
        return now + timedelta(hours=1)
    days = {"tomorrow": 1, "week": 7}.get(how)
    if days is None:
        raise TimeError(f"snooze is one of {', '.join(SNOOZES)}")
    zi = zone(tz)
    day = now.astimezone(zi).date() + timedelta(days=days)
    return datetime.combine(day, MORNING, tzinfo=zi).astimezone(UTC)


def local_text(at: datetime, tz: str | None) -> str:
    """`at` as people read it in their zone: "Tue 5 May 09:00"."""
    local = at.astimezone(zone(tz))
    return f"{local:%a} {local.day} {local:%b %H:%M}"


def day_text(at: datetime, tz: str | None) -> str:
    """The day of `at` in the zone: "3 May"."""
    local = at.astimezone(zone(tz))
    return f"{local.day} {local:%b}"
