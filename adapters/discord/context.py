"""What a Discord message says beyond its content: the message it replies to, and where a
forwarded message comes from, as fields of the core's InboundMessage (issue 15)."""

from __future__ import annotations

from typing import Any

import discord


def forwarded_text(message: discord.Message) -> str:
    """The words of a forward: Discord sends them in `message_snapshots`, with an empty content."""
    if not _is_forward(message) or not message.message_snapshots:
        return ""
    return message.message_snapshots[0].content


def reply_context(message: discord.Message, me_id: int, client: discord.Client | None) -> dict[str, Any]:
    """InboundMessage fields for a reply (`message_reference` type 0 with `referenced_message`)
    and a forward (`message_reference` type 1 with `message_snapshots`)."""
    reference = message.reference
    if reference is None or reference.message_id is None:
        return {}
    if _is_forward(message):
        # A snapshot carries no author: the forward is named by the channel it comes from.
        channel = client.get_channel(reference.channel_id) if client is not None else None
        name = getattr(channel, "name", None)
        return {
            "forwarded_from": f"#{name}" if name else "another Discord chat",
            # Where it comes from: maybe a message of the companion's own chats, a private
            # interval's included; the core reads it as the mode may (its id, and when it was sent).
            "forwarded_chat_id": str(reference.channel_id),
            "forwarded_message_id": str(reference.message_id),
            "forwarded_at": discord.utils.snowflake_time(reference.message_id).timestamp(),
        }
    fields: dict[str, Any] = {"reply_to_message_id": str(reference.message_id)}
    resolved = reference.resolved
    if isinstance(resolved, discord.Message):
        fields["quoted_text"] = resolved.content or None
        fields["quoted_from_companion"] = resolved.author.id == me_id
    return fields


def _is_forward(message: discord.Message) -> bool:
    reference = message.reference
    return reference is not None and reference.type == discord.MessageReferenceType.forward
