"""/mirror and /unmirror: bind a conversation's normal output to another chat, verified by one test post.

What a binding copies is decided elsewhere, in SQL: the mirror rows of an exchange are written
in the reply's transaction by an INSERT ... SELECT that excludes private messages and
conversations with an open segment. Here a person only creates, lists and removes bindings.
"""

from __future__ import annotations

import logging

from core.commands.call import CommandCall
from core.delivery.mirrors import source_label
from core.values import copy
from core.values.errors import DeliveryFailed, PrivateWriteRefused
from core.values.model import Binding, Reply

log = logging.getLogger(__name__)

MIRROR_USAGE = (
    "Usage: /mirror PLATFORM:CHAT_ID (for example /mirror discord:123456789012345678), or /mirror alone to list."
)
MAX_CHAT_ID = 64


def parse_target(args: str) -> tuple[str, str] | None:
    """`PLATFORM:CHAT_ID` as (platform, chat id), or None when it does not have that shape."""
    words = args.split()
    if len(words) != 1:
        return None
    platform, sep, chat_id = words[0].partition(":")
    platform = platform.strip().lower()
    if not sep or not platform.isalpha() or not chat_id or len(chat_id) > MAX_CHAT_ID:
        return None
    return platform, chat_id


async def mirror_command(call: CommandCall) -> Reply:
    """`/mirror` lists this conversation's bindings; `/mirror PLATFORM:CHAT_ID` adds one after a
    test post there went through. Nothing is stored when the post fails."""
    if not call.args.strip():
        return Reply(_listing(await call.services.bindings.bindings_of(call.turn.conversation.id)))
    target = parse_target(call.args)
    if target is None:
        return Reply(f"{MIRROR_USAGE} Nothing changed.")
    platform, chat_id = target
    services, conversation = call.services, call.turn.conversation
    if (platform, chat_id) == (conversation.platform, conversation.chat_id):
        return Reply("That is this conversation itself; a mirror goes to another chat. Nothing changed.")
    outbox = services.outbox
    configured = services.settings.platforms
    if outbox is None or (configured is not None and platform not in configured):
        return Reply(f"{platform} is not configured in this process, so I cannot post there. Nothing was stored.")
    if not outbox.serves(platform):
        return Reply(f"{platform} is configured here but not connected yet; try again in a moment. Nothing was stored.")
    try:
        await outbox.send_text(platform, chat_id, copy.MIRROR_HELLO.format(source=source_label(conversation)))
    except DeliveryFailed as exc:
        log.info("conversation %s: the test post to a %s chat failed (%s)", conversation.id, platform, exc.kind)
        return Reply(_post_failed(platform, chat_id, exc))
    try:
        binding = await services.bindings.add_binding(conversation.id, platform, chat_id, services.clock.now())
    except PrivateWriteRefused:
        return Reply(copy.PRIVATE_REFUSES.format(command=call.name))
    log.info("conversation %s: binding %s to a %s chat is active", conversation.id, binding.id, platform)
    return Reply(
        f"Mirror {binding.id} is on: from now on each normal exchange here is copied to {binding.target}. "
        f"{copy.MIRROR_MEANS} /unmirror {binding.id} stops it."
    )


async def unmirror_command(call: CommandCall) -> Reply:
    """`/unmirror N` removes binding N of this conversation, and the copies still waiting for it."""
    words = call.args.split()
    if len(words) != 1 or not words[0].isdigit():
        return Reply("Usage: /unmirror N (a mirror's number from /mirror). Nothing changed.")
    conversation = call.turn.conversation
    removed = await call.services.bindings.remove_binding(conversation.id, int(words[0]))
    if removed is None:
        return Reply(f"There is no mirror {words[0]} here; /mirror lists them. Nothing changed.")
    log.info("conversation %s: binding %s removed", conversation.id, removed.id)
    return Reply(f"Mirror {removed.id} to {removed.target} is removed; nothing more goes there.")


def _listing(bindings: list[Binding]) -> str:
    if not bindings:
        return f"Nothing here is mirrored. {MIRROR_USAGE}"
    lines = ["Mirrors of this conversation:"]
    for b in bindings:
        state = "active" if b.state == "active" else f"stopped: the chat refused my messages ({b.reason})"
        lines.append(f"{b.id}. {b.target} - {state}")
    lines += ["/unmirror N removes one; /mirror PLATFORM:CHAT_ID turns a stopped one on again.", copy.MIRROR_MEANS]
    return "\n".join(lines)


def _post_failed(platform: str, chat_id: str, exc: DeliveryFailed) -> str:
    where = f"{platform}:{chat_id}"
    if exc.permanent:
        why = (
            f"{platform} refused it ({exc.kind}): the chat may not exist, or the bot is not a member there or "
            "may not post"
        )
    else:
        why = f"{platform} could not be reached ({exc.kind}); try again in a moment"
    return f"I could not post a test message to {where}: {why}. Nothing was stored."
