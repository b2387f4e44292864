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
        raise ValueError(f"'{text}' is not an expiry; use a number with s, m, h or d (45s, 30m, 24h, 7d) or 'never'")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError("an expiry must be longer than zero")
    if seconds > _MAX_SECONDS:
        raise ValueError("an expiry can be at most 366 days (or 'never')")
    return float(seconds)


def describe_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"
