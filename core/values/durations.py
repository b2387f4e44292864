"""Durations people type: `45s`, `30m`, `24h`, `7d`, `never`."""

from __future__ import annotations

import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^(\d{1,6})([smhd])$")
_MAX_SECONDS = 366 * 86400


def parse_expiry(text: str) -> float | None:
    """Seconds until expiry, or None for `never`.

    Raises:
        ValueError: with a message fit to show the user.
    """
    value = text.strip().lower()
    if value == "never":
        return None
    match = _DURATION.match(value)
    if not match:
        # Never quotes the text: in `/private 2h PASSPHRASE` the word given as expiry is the secret.
        raise ValueError("the expiry must look like 45s, 30m, 24h, 7d or never")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError("an expiry must be longer than zero")
    if seconds > _MAX_SECONDS:
        raise ValueError("an expiry can be at most 366 days (or 'never')")
    return float(seconds)


def parse_gap(text: str, *, most: float) -> float:
    """A length of time people type for a setting (`90m`, `4h`, `1d`), in seconds, from 1 minute
    to `most`.

    Raises:
        ValueError: with a message fit to show the user.
    """
    match = _DURATION.match(text.strip().lower())
    if not match or match.group(2) == "s":
        raise ValueError("a length of time looks like 90m, 4h or 1d")
    seconds = float(int(match.group(1)) * _UNITS[match.group(2)])
    if not 60 <= seconds <= most:
        raise ValueError(f"it must be between 1 minute and {describe_seconds(most)}")
    return seconds


def describe_seconds(seconds: float) -> str:
    seconds = max(0, round(seconds))
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


_RELATIVE = re.compile(r"^(?:in\s+)?(\d{1,6})\s*([smhd])$")
_ABSOLUTE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:[ T](\d{1,2}):(\d{2}))?$")
_CLOCK = re.compile(r"^(?:at\s+)?([01]?\d|2[0-3]):([0-5]\d)$")


def parse_when(text: str, now: float, timezone: str) -> float:
    """A moment people type: `30m`, `in 2h`, `3d`, `7:00` (the next 7:00), `2026-12-24`,
    `2026-12-24 18:00`; clock times are wall-clock times in `timezone` (zoneinfo).

    Raises:
        ValueError: with a message fit to show the user.
    """
    from datetime import datetime
    from zoneinfo import ZoneInfo

    value = text.strip().lower()
    match = _RELATIVE.match(value)
    if match:
        seconds = int(match.group(1)) * _UNITS[match.group(2)]
        if not 0 < seconds <= 5 * 366 * 86400:
            raise ValueError("a time must be between now and five years from now")
        return now + seconds
    match = _CLOCK.match(value)
    if match:
        from datetime import timedelta

        zone = ZoneInfo(timezone)
        today = datetime.fromtimestamp(now, zone).date()
        for days in range(3):  # the next day may not have that time (a daylight-saving gap)
            day = today + timedelta(days=days)
            moment = datetime(day.year, day.month, day.day, int(match.group(1)), int(match.group(2)), tzinfo=zone)
            if moment.timestamp() > now:
                return moment.timestamp()
        raise ValueError(f"'{text}' is not a time I can place")
    match = _ABSOLUTE.match(value)
    if match:
        hour, minute = int(match.group(2) or 9), int(match.group(3) or 0)
        try:
            moment = datetime.fromisoformat(match.group(1)).replace(hour=hour, minute=minute, tzinfo=ZoneInfo(timezone))
        except ValueError:
            raise ValueError(f"'{text}' is not a real date and time") from None
        if moment.timestamp() <= now:
            raise ValueError(f"'{text}' is in the past")
        return moment.timestamp()
    raise ValueError(f"'{text}' is not a time; use 30m, 2h, 3d, 7:00, 2026-12-24 or 2026-12-24 18:00")


def format_moment(timestamp: float, timezone: str) -> str:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    return datetime.fromtimestamp(timestamp, ZoneInfo(timezone)).strftime("%Y-%m-%d %H:%M %Z")
