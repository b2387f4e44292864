"""The chat commands of proactive messages: /nudges, /quiet, /timezone and /cooldown. Each setting is a
lasting write: refused in private mode here (the registry's `lasting`) and by the store's guard."""

from __future__ import annotations

from core.commands.call import CommandCall
from core.proactive.manners import budget_of, check_timezone, cooldown_of, local, parse_window, zone_of
from core.values import copy
from core.values.durations import describe_seconds, parse_gap
from core.values.errors import PrivateWriteRefused
from core.values.model import ProactivePrefs, Reply


def _describe(call: CommandCall, prefs: ProactivePrefs) -> str:
    services = call.services
    manners = services.settings.manners
    budget = budget_of(prefs, manners)
    quiet = prefs.quiet if prefs.quiet is not None else (manners.quiet_hours or "off")
    zone = zone_of(prefs, manners)
    now = local(services.clock.now(), zone).strftime("%H:%M")
    where = "the chat you last wrote in" if prefs.pinned_conversation_id is None else "a chat you pinned"
    cooldown = cooldown_of(prefs, manners)
    gap = f"at least {describe_seconds(cooldown)} between two" if cooldown > 0 else "off"
    lines = [
        f"Nudges: {'off' if budget == 0 else f'at most {budget} a day'}, to {where}.",
        f"Quiet hours: {quiet}. Time zone: {zone.key} (it is {now} there). Cooldown: {gap}.",
        copy.NUDGES_MEAN.format(backoff=manners.backoff_after),
        "/nudges N|off|on|here, /quiet HH:MM-HH:MM|off, /timezone Area/City, /cooldown 4h|off|default change them.",
    ]
    return "\n".join(lines)


async def _set(call: CommandCall, name: str, value: float | str | None) -> Reply:
    person = call.turn.conversation.person_id
    if person is None:
        return Reply("Nudges are personal: change them in a one-to-one chat with me. Nothing changed.")
    try:
        prefs = await call.services.nudges.set_proactive_pref(person, call.turn.conversation.id, name, value)
    except PrivateWriteRefused:
        return Reply(copy.PRIVATE_REFUSES.format(command=call.name))
    return Reply(_describe(call, prefs))


async def _show(call: CommandCall) -> Reply:
    person = call.turn.conversation.person_id
    if person is None:
        return Reply("Nudges are personal: ask in a one-to-one chat with me.")
    return Reply(_describe(call, await call.services.nudges.proactive_prefs(person)))


async def nudges_command(call: CommandCall) -> Reply:
    word = call.args.strip().lower()
    if not word:
        return await _show(call)
    if word == "off":
        return await _set(call, "budget", 0)
    if word == "on":
        return await _set(call, "budget", None)
    if word == "here":
        if not call.turn.conversation.is_direct:
            return Reply("Nudges never go to a group: send /nudges here in our one-to-one chat. Nothing changed.")
        return await _set(call, "pinned_conversation_id", call.turn.conversation.id)
    if word.isdigit() and 0 <= int(word) <= 24:
        return await _set(call, "budget", int(word))
    return Reply("Usage: /nudges N (0 to 24 a day), /nudges off, /nudges on or /nudges here. Nothing changed.")


async def quiet_command(call: CommandCall) -> Reply:
    word = call.args.strip().lower()
    if not word:
        return await _show(call)
    if word == "off":
        return await _set(call, "quiet", "off")
    try:
        parse_window(word)
    except ValueError as exc:
        return Reply(f"Usage: /quiet HH:MM-HH:MM or /quiet off; {exc}. Nothing changed.")
    return await _set(call, "quiet", word)


async def timezone_command(call: CommandCall) -> Reply:
    name = call.args.strip()
    if not name:
        return await _show(call)
    try:
        check_timezone(name)
    except ValueError as exc:
        return Reply(f"{exc}. Nothing changed.")
    return await _set(call, "timezone", name)


COOLDOWN_MOST = 7 * 86400.0  # as COMPANION_NUDGE_COOLDOWN_MINUTES allows, and the column's CHECK


async def cooldown_command(call: CommandCall) -> Reply:
    """`/cooldown 4h` (90m, 1d: the least gap between two nudges), `/cooldown off` (no gap; the
    budget, quiet hours and back-off still hold), `/cooldown default` (COMPANION_NUDGE_COOLDOWN_MINUTES)."""
    word = call.args.strip().lower()
    if not word:
        return await _show(call)
    if word == "off":
        return await _set(call, "cooldown", 0.0)
    if word in ("default", "on"):
        return await _set(call, "cooldown", None)
    try:
        seconds = parse_gap(word, most=COOLDOWN_MOST)
    except ValueError as exc:
        return Reply(f"Usage: /cooldown 4h (or 90m, 1d), /cooldown off or /cooldown default; {exc}. Nothing changed.")
    return await _set(call, "cooldown", seconds)
