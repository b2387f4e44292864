"""The commands of the valve: /mode, /private, /normal and /forget private."""

from __future__ import annotations

import logging

from core.commands.call import CommandCall
from core.values import copy
from core.values.durations import parse_expiry
from core.values.model import Reply
from core.values.modes import PrivateState, with_notice

_log = logging.getLogger(__name__)


async def mode_command(call: CommandCall) -> Reply:
    state = call.state
    if not isinstance(state, PrivateState):
        return Reply(with_notice(state, f"You are in normal mode. {copy.NORMAL_MODE_MEANS}"))
    ends = call.services.valve.ends_at(state.segment)
    when = "It lasts until you send /normal."
    if ends is not None:
        at = await call.services.format_time(call.turn.conversation, ends)
        when = f"It ends at {at} at the latest, or earlier when you send /normal."
    return Reply(f"You are in private mode. {when} {copy.PRIVATE_MODE_MEANS}")


def _is_expiry(word: str) -> bool:
    try:
        parse_expiry(word)
    except ValueError:
        return False
    return True


async def private_command(call: CommandCall) -> Reply:
    # No answer quotes a word of the arguments: any of them may be the passphrase.
    words = call.args.split()
    if len(words) > 2:
        return Reply("Usage: /private PASSPHRASE [EXPIRY] (the passphrase is one word). Nothing changed.")
    if len(words) == 2 and _is_expiry(words[0]) and not _is_expiry(words[1]):
        return Reply(
            "Usage: /private PASSPHRASE [EXPIRY]: the passphrase comes first, the expiry second. Nothing changed."
        )
    passphrase = words[0] if words else ""
    expiry = words[1] if len(words) == 2 else None
    result = await call.services.valve.enter(call.turn.conversation, call.turn.account, passphrase, expiry)
    return Reply(result.text)


async def normal_command(call: CommandCall) -> Reply:
    services = call.services
    conversation = call.turn.conversation
    was_private = await services.valve.leave(conversation)
    if not was_private:
        return Reply(with_notice(call.state, "You are in normal mode already."))
    # The line is the answer, and the conversation's normal record says it was said.
    line = await services.transition()
    try:
        await services.log.add_message(conversation.id, "assistant", line, services.clock.now())
    except Exception as exc:  # noqa: BLE001 - leaving must work even when storage misbehaves
        _log.warning("storing the transition line failed (%s)", type(exc).__name__)
    return Reply(line)


async def forget_private(call: CommandCall) -> Reply:
    services = call.services
    conversation = call.turn.conversation
    await services.valve.leave(conversation, reason="forget")
    deleted = await services.forgetting.delete_segments_of(conversation.id, services.clock.now())
    one = deleted == 1
    return Reply(
        f"Private mode is off, and {deleted} private interval{'' if one else 's'} "
        f"of this conversation {'was' if one else 'were'} deleted now, "
        f"with everything derived from {'it' if one else 'them'}."
    )
