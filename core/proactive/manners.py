"""The manners of nudges as pure functions of one clock reading: quiet hours and the local day in
the person's zone (zoneinfo, never a fixed offset), the budget, cooldown, activity and back-off."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, time
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.ports.store.proactive import PrefsReader
from core.values.model import ProactivePrefs

log = logging.getLogger(__name__)

_WINDOW = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True, slots=True)
class Manners:
    """The configured defaults (COMPANION_*) and the fixed rules of nudges."""

    timezone: str = "UTC"
    quiet_hours: str | None = "22:00-08:00"
    budget: int = 2  # nudges per person per local day
    cooldown: float = 4 * 3600.0  # between two nudges to a person
    active_within: float = 30 * 60.0  # no nudge this soon after their last message
    backoff_after: int = 2  # unanswered nudges, then none until they write


def parse_window(text: str) -> tuple[time, time]:
    """`HH:MM-HH:MM` (24-hour) as its two wall-clock times.

    Raises:
        ValueError: in words fit for the person.
    """
    match = _WINDOW.match(text.strip())
    if not match:
        raise ValueError("quiet hours look like 22:00-08:00 (24-hour HH:MM-HH:MM), or off")
    start = time(int(match.group(1)), int(match.group(2)))
    end = time(int(match.group(3)), int(match.group(4)))
    if start == end:
        raise ValueError("quiet hours need a start and an end that differ")
    return start, end


def check_timezone(name: str) -> str:
    """An IANA zone name as zoneinfo knows it.

    Raises:
        ValueError: not a known zone.
    """
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"'{name}' is not a known time zone; use Area/City, for example Europe/Berlin") from None
    return name


def zone_of(prefs: ProactivePrefs, manners: Manners) -> ZoneInfo:
    try:
        return ZoneInfo(prefs.timezone or manners.timezone)
    except (ZoneInfoNotFoundError, ValueError):  # a zone removed from the tz database since it was set
        return ZoneInfo(manners.timezone)


def local(now: float, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(now, zone)


def local_day(now: float, zone: ZoneInfo) -> str:
    return local(now, zone).date().isoformat()


def quiet_window(prefs: ProactivePrefs, manners: Manners) -> tuple[time, time] | None:
    text = prefs.quiet if prefs.quiet is not None else manners.quiet_hours
    if text is None or text == "off":
        return None
    try:
        return parse_window(text)
    except ValueError:
        return parse_window(manners.quiet_hours) if manners.quiet_hours else None


def in_quiet_hours(now: float, zone: ZoneInfo, window: tuple[time, time] | None) -> bool:
    """Whether the person's wall clock reads inside the window. The wall clock comes from zoneinfo
    for this very instant, so a window across midnight or a daylight-saving change ends when their
    clock says so (08:00 is 08:00, whether the night was 23 or 25 hours long)."""
    if window is None:
        return False
    start, end = window
    wall = local(now, zone).time().replace(tzinfo=None)
    if start < end:
        return start <= wall < end
    return wall >= start or wall < end


def budget_of(prefs: ProactivePrefs, manners: Manners) -> int:
    return manners.budget if prefs.budget is None else prefs.budget


def cooldown_of(prefs: ProactivePrefs, manners: Manners) -> float:
    return manners.cooldown if prefs.cooldown is None else prefs.cooldown


def why_not(now: float, prefs: ProactivePrefs, manners: Manners, sent_today: int) -> str | None:
    """The reason a nudge may not go now, or None: disabled, quiet, active, backoff, cooldown,
    budget (checked in this order; the first that applies is recorded)."""
    budget = budget_of(prefs, manners)
    if budget <= 0:
        return "disabled"
    if in_quiet_hours(now, zone_of(prefs, manners), quiet_window(prefs, manners)):
        return "quiet"
    if prefs.last_wrote_at is not None and now - prefs.last_wrote_at < manners.active_within:
        return "active"
    if prefs.unanswered >= manners.backoff_after:
        return "backoff"
    if prefs.last_nudge_at is not None and now - prefs.last_nudge_at < cooldown_of(prefs, manners):
        return "cooldown"
    if sent_today >= budget:
        return "budget"
    return None


async def timezone_of(store: PrefsReader, person_id: int | None, default: str) -> str:
    """The person's time zone (/timezone), else `default` (COMPANION_TIMEZONE): every time a person is
    shown, and every clock time they give, is in it."""
    if person_id is None:
        return default
    try:
        prefs = await store.proactive_prefs(person_id)
    except Exception as exc:  # noqa: BLE001 - a read failure falls back to the configured zone
        log.warning("reading a person's time zone failed (%s)", type(exc).__name__)
        return default
    return prefs.timezone or default
